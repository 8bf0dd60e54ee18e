package policy

import (
	"errors"
	"strings"
)

// Reason codes, for the "reason" of events about blocked requests and
// connections. A reason string returned by this package is a code alone,
// or a code, ": " and a detail for people ("blocked_ip: 10.0.0.1 is in
// 10.0.0.0/8 (private network)"); ReasonCode returns the code.
const (
	// ReasonHostNotAllowed: no allowed_hosts pattern matches the name.
	ReasonHostNotAllowed = "host_not_allowed"
	// ReasonHostDenied: a denied_hosts pattern matches the name.
	ReasonHostDenied = "host_denied"
	// ReasonPortNotAllowed: the name is allowed, but not on this port:
	// an allowed_hosts pattern opens ports 80 and 443 unless it names
	// another ("api.example.com:8443").
	ReasonPortNotAllowed = "port_not_allowed"
	// ReasonInvalidHost: the name is not a valid ASCII host name, or is
	// an address.
	ReasonInvalidHost = "invalid_host"
	// ReasonScriptDenied: the policy script's is_host_allowed said no.
	ReasonScriptDenied = "script_denied"
	// ReasonBlockedIP: the address is in a blocked range.
	ReasonBlockedIP = "blocked_ip"
	// ReasonNoEgressRule: no egress rule allows a non-HTTP flow.
	ReasonNoEgressRule = "no_egress_rule"
	// ReasonSecretLeak: a request carries the placeholder of a secret
	// that is not scoped to its host, or its value in one of the forms
	// ordinary software writes it in (see MinValueLen).
	ReasonSecretLeak = "secret_leak"
	// ReasonSecretPlaintext: a request in plain HTTP carries the
	// placeholder (or the value) of a secret scoped to its host, which
	// is sent only over TLS unless the secret has allow_plaintext.
	ReasonSecretPlaintext = "secret_plaintext"
	// ReasonSecretUnrewritable: a request may carry a placeholder where
	// it cannot be replaced safely (a compressed body, a body past the
	// size bound, a value that cannot go into a header).
	ReasonSecretUnrewritable = "secret_unrewritable"
	// ReasonScriptBlocked: on_request or on_response returned None.
	ReasonScriptBlocked = "script_blocked"
	// ReasonHookBlocked: a Go OnRequest or OnResponse hook returned nil.
	ReasonHookBlocked = "hook_blocked"
	// ReasonPolicyError: the policy script or a hook failed (fault,
	// step or time limit, bad result). Policy errors block.
	ReasonPolicyError = "policy_error"
	// ReasonNoSNI: a TLS ClientHello named no server, or named an
	// address.
	ReasonNoSNI = "no_sni"
	// ReasonSNIMismatch: a TLS ClientHello named a server that is not
	// among the names DNS pinned to the address the sandbox connected
	// to (a forged SNI, or a raw-IP connection to an allowed host's
	// address).
	ReasonSNIMismatch = "sni_mismatch"
	// ReasonHostMismatch: an HTTP request's Host (or :authority, or
	// absolute URI) differs from the TLS server name, names a port other
	// than the one connected to, or, in plain HTTP, is not among the
	// names pinned to the destination address.
	ReasonHostMismatch = "host_mismatch"
	// ReasonProxyRequest: a CONNECT request; the sandbox has no proxy.
	ReasonProxyRequest = "proxy_request"
	// ReasonBadRequest: a request that cannot be forwarded as it is
	// (such as an asterisk-form target).
	ReasonBadRequest = "bad_request"
	// ReasonUpstreamError: not a block: the upstream server could not
	// be reached or failed.
	ReasonUpstreamError = "upstream_error"
	// ReasonLimit: a bound on connections, flows or questions in flight
	// was reached.
	ReasonLimit = "limit"
)

// ReasonCode returns the code of a reason string: the part before ": ".
func ReasonCode(reason string) string {
	code, _, _ := strings.Cut(reason, ": ")
	return code
}

// BlockError is the error of a request that must be blocked. Reason is
// one of the Reason codes.
type BlockError struct {
	Reason string
	Detail string
	Err    error
}

func (e *BlockError) Error() string {
	s := e.Reason
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *BlockError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrSecretLeak) and the like true for every
// BlockError with that reason.
func (e *BlockError) Is(target error) bool {
	t, ok := target.(*BlockError)
	return ok && t.Detail == "" && t.Err == nil && t.Reason == e.Reason
}

// Sentinels for errors.Is.
var (
	ErrSecretLeak         = &BlockError{Reason: ReasonSecretLeak}
	ErrSecretUnrewritable = &BlockError{Reason: ReasonSecretUnrewritable}
	ErrSecretPlaintext    = &BlockError{Reason: ReasonSecretPlaintext}
	ErrScriptBlocked      = &BlockError{Reason: ReasonScriptBlocked}
	ErrHookBlocked        = &BlockError{Reason: ReasonHookBlocked}
	ErrPolicy             = &BlockError{Reason: ReasonPolicyError}
)

// ReasonOf returns the reason code to report for an error from this
// package: a BlockError's Reason, ReasonPolicyError for any other
// error (fail closed), and "" for nil.
func ReasonOf(err error) string {
	if err == nil {
		return ""
	}
	var be *BlockError
	if errors.As(err, &be) {
		return be.Reason
	}
	return ReasonPolicyError
}

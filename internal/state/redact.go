package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// Redacted replaces secret values in configurations passed through Redact.
const Redacted = "[redacted]"

// Redact returns a copy of the JSON configuration cfg with the values of
// secrets replaced by "[redacted]", keeping the structure (objects, arrays,
// keys and their order) so that what was configured stays visible. Keys are
// never changed; a value is redacted when it is a string, number or boolean
// and either
//
//   - its key, or the key of an object or array it is in, contains
//     "secret", "token", "password", "api_key" or "apikey" (in any case), or
//   - it is inside the value of a "secrets" key, and either its key is
//     "value" or it is an entry of that value itself ("x" in
//     {"secrets": {"K": "x"}} or {"secrets": ["x"]}).
//
// So {"secrets": {"GH_TOKEN": {"value": "x", "hosts": ["github.com"]}}} and
// {"secrets": [{"name": "GH_TOKEN", "value": "x"}]} keep the name and the
// hosts of the secret, and {"policy_secrets": {"K": "x"}} keeps the name. null stays null. cfg that is not valid JSON is replaced as a
// whole by "[redacted]"; empty cfg is returned as is. The result is compact.
func Redact(cfg json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(cfg)) == 0 {
		return cfg
	}
	dec := json.NewDecoder(bytes.NewReader(cfg))
	dec.UseNumber()
	var out bytes.Buffer
	err := redactValue(dec, &out, plain)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("trailing data")
		}
	}
	if err != nil {
		out.Reset()
		writeString(&out, Redacted)
	}
	return out.Bytes()
}

// redactMode says what to do with the scalars of a value and, through
// childMode, with the values inside it.
type redactMode int

const (
	plain        redactMode = iota // keep scalars
	all                            // redact every scalar
	secretsKey                     // the value of a "secrets" key
	secretsEntry                   // an entry of the secrets object or array
	inSecrets                      // deeper inside a secrets entry
)

func (m redactMode) redactsScalars() bool {
	return m == all || m == secretsKey || m == secretsEntry
}

// childMode is the mode of the value of key in an object in mode m.
func (m redactMode) childMode(key string) redactMode {
	if m == all {
		return all
	}
	k := strings.ToLower(key)
	switch {
	case m == secretsKey:
		// Keys here name secrets: keep what describes them (hosts, ...),
		// redact their values.
		return secretsEntry
	case k == "secrets":
		return secretsKey
	case sensitiveKey(k):
		return all
	case k == "value" && (m == secretsEntry || m == inSecrets):
		return all
	case m == plain:
		return plain
	}
	return inSecrets
}

// elemMode is the mode of the elements of an array in mode m.
func (m redactMode) elemMode() redactMode {
	if m == secretsKey {
		return secretsEntry
	}
	return m
}

func sensitiveKey(lower string) bool {
	for _, s := range [...]string{"secret", "token", "password", "api_key", "apikey"} {
		if strings.Contains(lower, s) {
			return true
		}
	}
	return false
}

// redactValue copies the next JSON value from dec to out, redacting as mode
// says.
func redactValue(dec *json.Decoder, out *bytes.Buffer, mode redactMode) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			out.WriteByte('{')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					out.WriteByte(',')
				}
				ktok, err := dec.Token()
				if err != nil {
					return err
				}
				key, ok := ktok.(string)
				if !ok {
					return errors.New("object key is not a string")
				}
				writeString(out, key)
				out.WriteByte(':')
				if err := redactValue(dec, out, mode.childMode(key)); err != nil {
					return err
				}
			}
			out.WriteByte('}')
		case '[':
			out.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					out.WriteByte(',')
				}
				if err := redactValue(dec, out, mode.elemMode()); err != nil {
					return err
				}
			}
			out.WriteByte(']')
		default:
			return errors.New("unexpected " + t.String())
		}
		_, err := dec.Token() // the closing delimiter
		return err
	case nil:
		out.WriteString("null")
		return nil
	}
	if mode.redactsScalars() {
		writeString(out, Redacted)
		return nil
	}
	switch t := tok.(type) {
	case string:
		writeString(out, t)
	case json.Number:
		out.WriteString(t.String())
	case bool:
		if t {
			out.WriteString("true")
		} else {
			out.WriteString("false")
		}
	}
	return nil
}

// writeString writes s as a JSON string, without escaping <, > and &.
func writeString(out *bytes.Buffer, s string) {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	out.Truncate(out.Len() - 1) // Encode's newline
}

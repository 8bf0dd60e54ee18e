package oci

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// Plain HTTP goes to a loopback registry, or anywhere with Insecure;
// elsewhere it is refused before anything is sent.
func TestSchemeGuard(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	defer srv.Close()
	sent := 0
	next := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent++
		return http.DefaultTransport.RoundTrip(r)
	})
	strict := &schemeGuard{next: next}
	for _, url := range []string{"http://10.1.2.3:5000/v2/", "http://registry.example.com/v2/", "http://192.168.0.1/v2/"} {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		var ge *guardError
		if _, err := strict.RoundTrip(req); !errors.As(err, &ge) {
			t.Errorf("%s without --insecure: %v, want a refusal", url, err)
		}
	}
	if sent != 0 {
		t.Fatalf("%d refused requests were sent", sent)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v2/", nil)
	resp, err := strict.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusTeapot {
		t.Fatalf("plain HTTP to a loopback registry: %v", err)
	}
	resp.Body.Close()
	for host, want := range map[string]bool{"localhost": true, "reg.localhost": true, "127.0.0.2": true, "::1": true, "10.0.0.1": false, "example.com": false} {
		if loopback(host) != want {
			t.Errorf("loopback(%q) = %v", host, !want)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

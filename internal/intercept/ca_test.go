package intercept

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCAFilesAndReload(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "ca")
	ca, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("%s is %v, want 0700", dir, fi.Mode().Perm())
	}
	for _, name := range []string{caCertFile, caKeyFile} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s is %v, want 0600", name, fi.Mode().Perm())
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
	cert := ca.Certificate()
	if !cert.IsCA || cert.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("the CA certificate: IsCA %v, key %v", cert.IsCA, cert.PublicKeyAlgorithm)
	}
	onDisk, _ := os.ReadFile(filepath.Join(dir, caCertFile))
	if !bytes.Equal(onDisk, ca.CertPEM()) {
		t.Error("CertPEM differs from ca.pem")
	}

	again, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.CertPEM(), ca.CertPEM()) {
		t.Error("reloading gave another certificate")
	}
	// A leaf of the reloaded CA verifies against the first one's
	// certificate: the key is the same too.
	leaf, err := again.Leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "api.example.com"}); err != nil {
		t.Errorf("a leaf of the reloaded CA does not verify: %v", err)
	}
}

func TestCAConcurrentGoroutines(t *testing.T) {
	dir := t.TempDir()
	const n = 16
	pems := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ca, err := LoadOrCreateCA(dir)
			errs[i] = err
			if err == nil {
				pems[i] = ca.CertPEM()
			}
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !bytes.Equal(pems[i], pems[0]) {
			t.Fatalf("goroutine %d got another CA", i)
		}
	}
}

// TestCAConcurrentProcesses runs LoadOrCreateCA in several processes at
// once (this test binary, re-executed) on one directory: all get the
// same CA.
func TestCAConcurrentProcesses(t *testing.T) {
	if dir := os.Getenv("INTERCEPT_CA_HELPER_DIR"); dir != "" {
		ca, err := LoadOrCreateCA(dir)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		sum := sha256.Sum256(ca.CertPEM())
		fmt.Println("ca:" + hex.EncodeToString(sum[:]))
		os.Exit(0)
	}
	dir := t.TempDir()
	const n = 4
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bytes.Buffer, n)
	for i := range n {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^TestCAConcurrentProcesses$")
		cmds[i].Env = append(os.Environ(), "INTERCEPT_CA_HELPER_DIR="+dir)
		outs[i] = new(bytes.Buffer)
		cmds[i].Stdout = outs[i]
		cmds[i].Stderr = outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	var first string
	for i := range n {
		if err := cmds[i].Wait(); err != nil {
			t.Fatalf("process %d: %v: %s", i, err, outs[i])
		}
		var got string
		for _, line := range strings.Split(outs[i].String(), "\n") {
			if strings.HasPrefix(line, "ca:") {
				got = line
			}
		}
		if got == "" {
			t.Fatalf("process %d printed no CA: %s", i, outs[i])
		}
		if i == 0 {
			first = got
		} else if got != first {
			t.Fatalf("process %d got another CA", i)
		}
	}
	ca, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(ca.CertPEM())
	if "ca:"+hex.EncodeToString(sum[:]) != first {
		t.Error("the CA on disk is not the one the processes got")
	}
}

func TestCABroken(t *testing.T) {
	other := t.TempDir()
	if _, err := LoadOrCreateCA(other); err != nil {
		t.Fatal(err)
	}
	otherKey, _ := os.ReadFile(filepath.Join(other, caKeyFile))

	garbageKey := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("not DER")})
	leafCert := func() []byte {
		ca, err := LoadOrCreateCA(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := ca.Leaf("x.example.com")
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Certificate[0]})
	}

	for _, tc := range []struct {
		name  string
		spoil func(dir string)
		file  string
		words string
	}{
		{"garbage certificate", func(dir string) { write(t, dir, caCertFile, []byte("garbage")) }, caCertFile, "not a PEM certificate"},
		{"key of another CA", func(dir string) { write(t, dir, caKeyFile, otherKey) }, caKeyFile, "does not belong"},
		{"unparsable key", func(dir string) { write(t, dir, caKeyFile, garbageKey) }, caKeyFile, "parsing the key"},
		{"not a CA", func(dir string) { write(t, dir, caCertFile, leafCert()) }, caCertFile, "not a CA"},
		{"certificate without key", func(dir string) { os.Remove(filepath.Join(dir, caKeyFile)) }, caKeyFile, "missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := LoadOrCreateCA(dir); err != nil {
				t.Fatal(err)
			}
			tc.spoil(dir)
			_, err := LoadOrCreateCA(dir)
			if err == nil {
				t.Fatal("a broken CA loaded")
			}
			msg := err.Error()
			for _, want := range []string{filepath.Join(dir, tc.file), tc.words, "remove the directory " + dir} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not say %q", msg, want)
				}
			}
		})
	}
}

func write(t *testing.T, dir, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCAIncomplete: a key without a certificate is what a creation that
// died leaves; the next LoadOrCreateCA makes a CA.
func TestCAIncomplete(t *testing.T) {
	dir := t.TempDir()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(key)
	write(t, dir, caKeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	ca, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ca.key.PublicKey.Equal(&key.PublicKey) {
		t.Error("the leftover key was kept")
	}
}

func TestLeaf(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	cert, err := ca.Leaf("API.Example.com.")
	if err != nil {
		t.Fatal(err)
	}
	leaf := cert.Leaf
	if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "api.example.com" || len(leaf.IPAddresses) != 0 {
		t.Errorf("SANs %v %v, want api.example.com alone", leaf.DNSNames, leaf.IPAddresses)
	}
	if leaf.IsCA || leaf.PublicKeyAlgorithm != x509.ECDSA || leaf.PublicKey.(*ecdsa.PublicKey).Curve != elliptic.P256() {
		t.Errorf("leaf: IsCA %v, key %v", leaf.IsCA, leaf.PublicKeyAlgorithm)
	}
	if !leaf.NotBefore.Before(before.Add(-50*time.Minute)) || leaf.NotAfter.After(before.Add(leafValidity+time.Minute)) || leaf.NotAfter.After(ca.Certificate().NotAfter) {
		t.Errorf("validity %s to %s", leaf.NotBefore, leaf.NotAfter)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "api.example.com", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the leaf does not verify: %v", err)
	}
	again, err := ca.Leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if again != cert || ca.Minted() != 1 {
		t.Errorf("the same name minted again (minted %d)", ca.Minted())
	}
	for _, bad := range []string{"", "10.0.0.1", "::1", "a..b", "bad name", ".example.com", strings.Repeat("a", 300)} {
		if _, err := ca.Leaf(bad); err == nil {
			t.Errorf("Leaf(%q) minted", bad)
		}
	}
}

func TestLeafSingleflight(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ca.Leaf("api.example.com"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if ca.Minted() != 1 {
		t.Errorf("minted %d, want 1", ca.Minted())
	}
}

func TestLeafLRU(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ca.leaves = newLeafCache(2)
	for _, name := range []string{"a.example.com", "b.example.com", "a.example.com", "c.example.com"} {
		if _, err := ca.Leaf(name); err != nil {
			t.Fatal(err)
		}
	}
	// a was used after b, so b went when c came.
	if ca.Minted() != 3 || !ca.leaves.has("a.example.com") || ca.leaves.has("b.example.com") || !ca.leaves.has("c.example.com") {
		t.Fatalf("minted %d; cached a %v b %v c %v", ca.Minted(), ca.leaves.has("a.example.com"), ca.leaves.has("b.example.com"), ca.leaves.has("c.example.com"))
	}
	if _, err := ca.Leaf("b.example.com"); err != nil {
		t.Fatal(err)
	}
	if ca.Minted() != 4 {
		t.Errorf("minted %d, want 4 (b again)", ca.Minted())
	}
}

func TestPrewarm(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ca.Prewarm("api.example.com")
	ca.Prewarm("api.example.com")
	ca.Prewarm("10.0.0.1") // not a name: nothing
	// Whether the background mint is still running or done, Leaf shares
	// it: one mint.
	if _, err := ca.Leaf("api.example.com"); err != nil {
		t.Fatal(err)
	}
	if ca.Minted() != 1 {
		t.Errorf("minted %d, want 1", ca.Minted())
	}

	ca.Prewarm("warm.example.com")
	deadline := time.Now().Add(20 * time.Second) // a guard against a hang, not a measure
	for !ca.leaves.has("warm.example.com") || ca.Minted() != 2 {
		if time.Now().After(deadline) {
			t.Fatal("Prewarm minted nothing")
		}
		time.Sleep(time.Millisecond)
	}
	ca.Prewarm("warm.example.com") // cached: nothing
	if _, err := ca.Leaf("warm.example.com"); err != nil {
		t.Fatal(err)
	}
	if ca.Minted() != 2 {
		t.Errorf("minted %d, want 2", ca.Minted())
	}
}

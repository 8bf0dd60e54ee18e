package intercept

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// File names in the CA directory.
const (
	caCertFile = "ca.pem"
	caKeyFile  = "ca-key.pem"
	caLockFile = ".lock"
)

// caValidity is how long a new CA certificate is valid.
const caValidity = 10 * 365 * 24 * time.Hour

// CA is the per-user certificate authority that signs leaf certificates
// for intercepted TLS. It is safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	leaves  *leafCache
}

// errIncomplete is a CA directory with a key and no certificate: a
// creation that did not finish (the certificate is written last).
var errIncomplete = errors.New("the CA directory holds a key but no certificate")

// LoadOrCreateCA loads the CA from dir (ca.pem: the certificate,
// ca-key.pem: its PKCS#8 ECDSA key), creating dir (0700) and both files
// (0600) when they are absent. Processes that create it at the same time
// agree on one CA: files are written under a temporary name and linked
// into place under an flock on dir/.lock, and the CA is read again once
// the lock is held. A malformed or mismatched existing CA is an error
// that names the file; removing the directory makes a new CA.
func LoadOrCreateCA(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("intercept CA: creating %s: %w", dir, err)
	}
	ca, err := loadCA(dir)
	if err == nil || !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errIncomplete) {
		return ca, err
	}
	unlock, err := lockDir(filepath.Join(dir, caLockFile))
	if err != nil {
		return nil, fmt.Errorf("intercept CA: locking %s: %w", dir, err)
	}
	defer unlock()
	// Someone may have created it while we waited for the lock.
	ca, err = loadCA(dir)
	switch {
	case err == nil:
		return ca, nil
	case errors.Is(err, errIncomplete):
		// A creation died between its two links; nobody can have
		// trusted a certificate that was never written.
		if err := os.Remove(filepath.Join(dir, caKeyFile)); err != nil {
			return nil, fmt.Errorf("intercept CA: removing the incomplete %s: %w", filepath.Join(dir, caKeyFile), err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	// A link that finds its name taken means another process won
	// without the lock (where there is no flock): read what it wrote.
	if err := createCA(dir); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	return loadCA(dir)
}

// CertPEM returns the CA certificate in PEM, for the sandbox's trust
// store.
func (c *CA) CertPEM() []byte { return bytes.Clone(c.certPEM) }

// Certificate returns the CA certificate.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// loadCA reads and checks the CA in dir. Both files absent is
// fs.ErrNotExist; a key alone is errIncomplete.
func loadCA(dir string) (*CA, error) {
	certPath := filepath.Join(dir, caCertFile)
	keyPath := filepath.Join(dir, caKeyFile)
	bad := func(path, format string, args ...any) error {
		return fmt.Errorf("intercept CA: %s: %s; remove the directory %s to make a new CA (sandboxes must then trust the new certificate)", path, fmt.Sprintf(format, args...), dir)
	}
	certData, certErr := os.ReadFile(certPath)
	keyData, keyErr := os.ReadFile(keyPath)
	switch {
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
		return nil, fmt.Errorf("intercept CA: no CA in %s: %w", dir, fs.ErrNotExist)
	case errors.Is(certErr, fs.ErrNotExist) && keyErr == nil:
		return nil, fmt.Errorf("intercept CA: %s: %w", dir, errIncomplete)
	case certErr != nil:
		if errors.Is(certErr, fs.ErrNotExist) {
			return nil, bad(certPath, "missing")
		}
		return nil, fmt.Errorf("intercept CA: reading %s: %v", certPath, certErr)
	case keyErr != nil:
		if errors.Is(keyErr, fs.ErrNotExist) {
			return nil, bad(keyPath, "missing, but %s is there", caCertFile)
		}
		return nil, fmt.Errorf("intercept CA: reading %s: %v", keyPath, keyErr)
	}

	block, _ := pem.Decode(certData)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, bad(certPath, "not a PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, bad(certPath, "parsing the certificate: %v", err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, bad(certPath, "not a CA certificate")
	}
	if now := time.Now(); now.After(cert.NotAfter) {
		return nil, bad(certPath, "the CA certificate expired on %s", cert.NotAfter.Format(time.DateOnly))
	}

	kb, _ := pem.Decode(keyData)
	if kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, bad(keyPath, "not a PEM PKCS#8 private key")
	}
	parsed, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, bad(keyPath, "parsing the key: %v", err)
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok {
		return nil, bad(keyPath, "a %T, not an ECDSA key", parsed)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, bad(keyPath, "the key does not belong to the certificate in %s", caCertFile)
	}
	return &CA{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		leaves:  newLeafCache(defaultLeafCacheSize),
	}, nil
}

// createCA makes a new CA in dir. The caller holds the directory's lock
// and has checked that neither file exists. The key is linked into place
// first, the certificate last: a certificate is never there without its
// key.
func createCA(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("intercept CA: generating the key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return fmt.Errorf("intercept CA: %w", err)
	}
	now := time.Now()
	host, _ := os.Hostname()
	name := "airlock sandbox CA"
	if host != "" {
		name += " on " + host
	}
	if len(name) > 64 { // the longest common name X.509 allows
		name = name[:64]
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"airlock"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("intercept CA: signing the certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("intercept CA: encoding the key: %w", err)
	}
	if err := linkNew(dir, caKeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})); err != nil {
		return err
	}
	if err := linkNew(dir, caCertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the links durable where the file system allows
		_ = d.Close()
	}
	return nil
}

// linkNew writes data to a temporary file (0600) in dir, syncs it, and
// links it as name, failing if name exists.
func linkNew(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return fmt.Errorf("intercept CA: writing %s: %w", name, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("intercept CA: writing %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("intercept CA: writing %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("intercept CA: writing %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("intercept CA: writing %s: %w", name, err)
	}
	if err := os.Link(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("intercept CA: putting %s in place: %w", name, err)
	}
	return nil
}

// randomSerial returns a random positive 128-bit serial number.
func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("making a serial number: %w", err)
	}
	return serial.Add(serial, big.NewInt(1)), nil
}

package botapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"botpool.dev/botpool/internal/kubetest"
)

// testCert is a self-signed certificate for 127.0.0.1, written as PEM files.
type testCert struct {
	pool   *x509.CertPool
	serial *big.Int
}

func writeTestCert(t *testing.T, certFile, keyFile string, serial int64) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: "botpool bot API test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// Key first, then certificate: the watcher reloads on the certificate's write and must
	// find the matching key already there.
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return testCert{pool: pool, serial: cert.SerialNumber}
}

// TestServesTLS: with a key pair the bot API speaks HTTPS only, with that certificate, and
// picks up a renewed certificate written over the files without a restart.
func TestServesTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := writeTestCert(t, certFile, keyFile, 1)
	addr := kubetest.FreeLocalAddr(t)
	s := New(Config{Addr: addr, TLSCertFile: certFile, TLSKeyFile: keyFile, Log: logr.Discard()})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})

	// get fetches an unknown path (answered 404 without touching the cache) and returns the
	// serial of the certificate the server presented.
	get := func(roots *x509.CertPool) (*big.Int, error) {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true, // every request a new handshake, with the current certificate
		}}
		resp, err := c.Get("https://" + addr + "/nowhere")
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusNotFound {
			return nil, fmt.Errorf("status %d, want 404", resp.StatusCode)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber, nil
	}
	kubetest.Eventually(t, time.Minute, func() error {
		serial, err := get(first.pool)
		if err != nil {
			return err
		}
		if serial.Cmp(first.serial) != 0 {
			return fmt.Errorf("served certificate %v, want %v", serial, first.serial)
		}
		return nil
	})

	// Plain HTTP gets no API: Go's server answers 400 to an HTTP request on a TLS port.
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/nowhere")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("plain HTTP to the TLS port answered %d, want 400", resp.StatusCode)
	}

	// A renewed certificate (as when the kubelet updates a mounted Secret) is served to new
	// connections.
	second := writeTestCert(t, certFile, keyFile, 2)
	kubetest.Eventually(t, time.Minute, func() error {
		serial, err := get(second.pool)
		if err != nil {
			return err
		}
		if serial.Cmp(second.serial) != 0 {
			return fmt.Errorf("served certificate %v, want the renewed %v", serial, second.serial)
		}
		return nil
	})
}

// TestTLSBadKeyPairStopsStart: a missing or mismatched key pair is an error at start, not a
// server that fails every handshake.
func TestTLSBadKeyPairStopsStart(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	s := New(Config{Addr: kubetest.FreeLocalAddr(t), TLSCertFile: certFile, TLSKeyFile: keyFile, Log: logr.Discard()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "TLS certificate") {
			t.Fatalf("Start with no key pair: %v, want a TLS certificate error", err)
		}
	case <-time.After(30 * time.Second): // only a broken Start gets here
		cancel()
		t.Fatalf("Start is serving without its key pair (then: %v)", <-done)
	}
}

package tlsutil_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/plugreg/plugreg/tests/framework/lazymount"
	"github.com/plugreg/plugreg/tlsutil"
)

// A CA written with WriteFiles is whole after a power cut right after it
// returns: a plain write left an empty key, which then blocked creating
// the CA again.
func TestWriteFilesSurvivesAPowerCut(t *testing.T) {
	m := lazymount.New(t)
	ca, err := tlsutil.CreateCA(tlsutil.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(m.Dir, "ca.pem"), filepath.Join(m.Dir, "ca-key.pem")
	if err := ca.WriteFiles(certPath, keyPath); err != nil {
		t.Fatal(err)
	}
	m.Cut(nil)
	for path, want := range map[string]struct {
		data []byte
		mode os.FileMode
	}{certPath: {ca.CertPEM, 0o644}, keyPath: {ca.KeyPEM, 0o600}} {
		got, err := os.ReadFile(path)
		if err != nil || string(got) != string(want.data) {
			t.Fatalf("%s after a power cut: %d bytes, %v", path, len(got), err)
		}
		if info, err := os.Stat(path); err != nil || info.Mode().Perm() != want.mode {
			t.Fatalf("%s: mode %v (%v), want %v", path, info.Mode().Perm(), err, want.mode)
		}
	}
}

package pluginwatcher

import (
	"errors"
	"testing"

	"github.com/plugreg/plugreg/api"
)

func TestHandlers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		h        Handler
		plugin   string
		versions []string
		want     string // the version chosen; "" with ok=false: refused
		ok       bool
	}{
		{"CSI 1.0.0", CSI, "c", []string{"1.0.0"}, "1.0.0", true},
		{"CSI highest 1.x, 2.x ignored", CSI, "c", []string{"0.3.0", "1.2.0", "v1.10", "2.0.0"}, "v1.10", true},
		{"CSI unparsable beside a good one", CSI, "c", []string{"banana", "1.5.0-rc1"}, "1.5.0-rc1", true},
		{"CSI major only", CSI, "c", []string{"1"}, "", false},
		{"CSI zero-prefixed", CSI, "c", []string{"01.0"}, "", false},
		{"CSI 0.x only", CSI, "c", []string{"0.2.0", "0.3.0"}, "", false},
		{"CSI 2.x only", CSI, "c", []string{"2.0.0"}, "", false},
		{"CSI none", CSI, "c", nil, "", false},
		{"DRA v1 and v1beta1", DRA, "gpu.example.com", []string{"v1beta1.DRAPlugin", "v1.DRAPlugin"}, "v1.DRAPlugin", true},
		{"DRA v1beta1 with health", DRA, "gpu.example.com", []string{"v1beta1.DRAPlugin", "v1.DRAResourceHealth"}, "v1beta1.DRAPlugin", true},
		{"DRA a version number", DRA, "gpu.example.com", []string{"1.0.0"}, "", false},
		{"DRA upper case name", DRA, "GPU.example.com", []string{"v1.DRAPlugin"}, "", false},
		{"DRA label ending in a dash", DRA, "gpu-.example.com", []string{"v1.DRAPlugin"}, "", false},
		{"DRA none", DRA, "gpu.example.com", nil, "", false},
		{"device v1beta1", Device, "gpu", []string{"v1alpha", "v1beta1"}, "v1beta1", true},
		{"device none", Device, "gpu", nil, "", false},
		{"generic first version", Generic, "w", []string{"b", "a"}, "b", true},
		{"generic no version", Generic, "w", nil, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.h.Validate(tc.plugin, "/x.sock", tc.versions)
			if tc.ok != (err == nil) || got != tc.want {
				t.Fatalf("Validate(%q, %q) = %q, %v; want %q ok=%v", tc.plugin, tc.versions, got, err, tc.want, tc.ok)
			}
			if err != nil && !errors.Is(err, api.ErrInvalid) {
				t.Fatalf("error %v does not wrap api.ErrInvalid", err)
			}
		})
	}
}

// A handler in Config.Handlers replaces the built-in one for its type.
func TestHandlerOverride(t *testing.T) {
	f := newFixture(t)
	f.start(t, func(c *Config) {
		c.Handlers = map[string]Handler{"DRAPlugin": HandlerFunc(func(name, _ string, _ []string) (string, error) {
			return "", errors.Join(api.ErrInvalid, errors.New("no DRA here"))
		})}
	})
	p := startPlugin(t, f.dir+"/p.sock", draInfo("d.example.com"))
	if s := waitStatus(t, p, false); s.Error == "" {
		t.Fatal("no reason given")
	}
	if n := f.reg.registers.Load(); n != 0 {
		t.Fatalf("%d Register calls", n)
	}
}

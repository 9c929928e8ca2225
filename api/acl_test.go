package api

import (
	"errors"
	"testing"
)

func TestAuthorizer(t *testing.T) {
	csiWrite := TokenAuthorizer(&ACLToken{Policies: []ACLPolicy{{Kind: ACLWrite, Types: []string{"csi-*", "device"}}}})
	read := TokenAuthorizer(&ACLToken{Policies: []ACLPolicy{{Kind: ACLRead}}})
	op := TokenAuthorizer(&ACLToken{Policies: []ACLPolicy{{Kind: ACLOperator}}})
	cases := []struct {
		name                                         string
		a                                            Authorizer
		typ                                          string
		read, write, readAll, writeAll, any, operate bool
	}{
		{"allow all", AllowAll(), "x", true, true, true, true, true, true},
		{"deny all", DenyAll(), "x", false, false, false, false, false, false},
		{"csi-* on csi-node", csiWrite, "csi-node", true, true, false, false, true, false},
		{"csi-* on csi (no dash)", csiWrite, "csi", false, false, false, false, true, false},
		{"exact device", csiWrite, "device", true, true, false, false, true, false},
		{"exact is not a prefix", csiWrite, "devices", false, false, false, false, true, false},
		{"read all", read, "anything", true, false, true, false, true, false},
		{"operator", op, "anything", true, true, true, true, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := []bool{tc.a.CanRead(tc.typ), tc.a.CanWrite(tc.typ), tc.a.CanReadAll(), tc.a.CanWriteAll(), tc.a.CanReadAny(), tc.a.IsOperator()}
			want := []bool{tc.read, tc.write, tc.readAll, tc.writeAll, tc.any, tc.operate}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("read, write, readAll, writeAll, any, operator = %v, want %v", got, want)
				}
			}
		})
	}
}

func TestValidatePolicies(t *testing.T) {
	cases := []struct {
		name string
		ps   []ACLPolicy
		err  error
	}{
		{"none", nil, ErrInvalid},
		{"unknown kind", []ACLPolicy{{Kind: "admin"}}, ErrInvalid},
		{"operator with types", []ACLPolicy{{Kind: ACLOperator, Types: []string{"x"}}}, ErrInvalid},
		{"star inside", []ACLPolicy{{Kind: ACLRead, Types: []string{"c*i"}}}, ErrInvalid},
		{"slash", []ACLPolicy{{Kind: ACLRead, Types: []string{"a/b"}}}, ErrInvalid},
		{"too many", make([]ACLPolicy, MaxACLPolicies+1), ErrTooLarge},
		{"prefix", []ACLPolicy{{Kind: ACLWrite, Types: []string{"csi-*"}}}, nil},
		{"every type by star", []ACLPolicy{{Kind: ACLRead, Types: []string{"*"}}}, nil},
	}
	for _, tc := range cases {
		if err := ValidatePolicies(tc.ps); !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
		}
	}
	if a, b := HashSecret("x"), HashSecret("x"); a != b || len(a) != 64 {
		t.Fatalf("hash %q %q", a, b)
	}
	acc, sec, err := NewACLSecret()
	if err != nil || len(acc) != 36 || len(sec) != 36 || acc == sec {
		t.Fatalf("secret %q %q %v", acc, sec, err)
	}
}

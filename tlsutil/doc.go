// Package tlsutil owns plugreg's TLS material and policy: the cluster's CA
// pool and this agent's key pair, read from PEM files and reloaded on
// demand (SIGHUP), turned into *tls.Config for the three places that speak
// TLS: the server port (Raft and internal RPC, incoming and outgoing), the
// HTTP API, and clients (the Go client, the CLI). It also makes a small
// PKI for development and tests with crypto/x509 (`plugreg tls`).
//
// The policy follows Consul's flags, so operators who know them know these:
//
//   - VerifyIncoming: servers require a client certificate signed by the
//     CA on the server port and on HTTPS; without it they accept TLS
//     without one, and plaintext.
//   - VerifyOutgoing: connections this agent opens to server ports use TLS
//     and verify the server's certificate against the CA.
//   - VerifyServerHostname: outgoing connections also check that the peer's
//     certificate names server.<cluster>.plugreg (so a client certificate
//     from the same CA cannot pose as a server), and a server port with
//     VerifyIncoming admits Raft only from a certificate with that name.
//     It implies VerifyOutgoing.
//
// TLS 1.2 is the minimum everywhere. The package has no dependency beyond
// the standard library: the client and the plugin SDK import it without
// pulling the server in.
//
// Caller's duties: build one Configurator per agent and share it; call
// Reload on SIGHUP (a failed reload keeps the material in use and returns
// the error); every *tls.Config it hands out reads the current material at
// each handshake, so nothing else needs to be rebuilt.
package tlsutil

package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/plugreg/plugreg/tlsutil"
)

const (
	caCertName = "plugreg-agent-ca.pem"
	caKeyName  = "plugreg-agent-ca-key.pem"
)

func runTLSCACreate(args []string) error {
	fs := flag.NewFlagSet("tls ca create", flag.ContinueOnError)
	fs.Usage = usageOf(fs, "", "Creates a CA certificate and key for the cluster's certificates (a dev PKI, with\nConsul's file names). Refuses to overwrite files that are there.")
	dir := fs.String("dir", ".", "directory to write "+caCertName+" and "+caKeyName+" to")
	days := fs.Int("days", 1825, "days the CA is valid")
	name := fs.String("common-name", "", "the CA's common name (empty: plugreg CA <random>)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *days < 1 {
		return fmt.Errorf("-days %d: want at least 1", *days)
	}
	certPath, keyPath := filepath.Join(*dir, caCertName), filepath.Join(*dir, caKeyName)
	if err := refuseOverwrite(certPath, keyPath); err != nil {
		return err
	}
	kp, err := tlsutil.CreateCA(tlsutil.CAOptions{CommonName: *name, Validity: time.Duration(*days) * 24 * time.Hour})
	if err != nil {
		return err
	}
	if err := kp.WriteFiles(certPath, keyPath); err != nil {
		return err
	}
	fmt.Printf("==> CA certificate: %s\n==> CA key: %s (keep it secret; it signs the cluster's certificates)\n", certPath, keyPath)
	return nil
}

func runTLSCertCreate(args []string) error {
	fs := flag.NewFlagSet("tls cert create", flag.ContinueOnError)
	fs.Usage = usageOf(fs, "", "Creates a server (-server) or client (-client) certificate and key signed by the CA.")
	server := fs.Bool("server", false, "a server certificate: names server.<cluster-name>.plugreg")
	clientCert := fs.Bool("client", false, "a client certificate (client agents, the CLI, plugins): names client.<cluster-name>.plugreg")
	dir := fs.String("dir", ".", "directory to write the certificate and key to, and to find the CA in")
	caFile := fs.String("ca", "", "CA certificate (empty: DIR/"+caCertName+")")
	keyFile := fs.String("key", "", "CA key (empty: DIR/"+caKeyName+")")
	cluster := fs.String("cluster-name", tlsutil.DefaultClusterName, "the cluster's name")
	days := fs.Int("days", 365, "days the certificate is valid")
	var dnsNames, ips listFlag
	fs.Var(&dnsNames, "additional-dnsname", "another DNS name for the certificate (repeatable)")
	fs.Var(&ips, "additional-ipaddress", "another IP address for the certificate (repeatable; 127.0.0.1 and ::1 are always in)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *server == *clientCert {
		return errors.New("say -server or -client")
	}
	if *days < 1 {
		return fmt.Errorf("-days %d: want at least 1", *days)
	}
	o := tlsutil.CertOptions{Server: *server, ClusterName: *cluster, DNSNames: dnsNames, Validity: time.Duration(*days) * 24 * time.Hour}
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return fmt.Errorf("-additional-ipaddress %q: not an IP address", s)
		}
		o.IPs = append(o.IPs, ip)
	}
	if *caFile == "" {
		*caFile = filepath.Join(*dir, caCertName)
	}
	if *keyFile == "" {
		*keyFile = filepath.Join(*dir, caKeyName)
	}
	var ca tlsutil.KeyPair
	var err error
	if ca.CertPEM, err = os.ReadFile(*caFile); err != nil {
		return fmt.Errorf("read CA certificate: %w (make one with 'plugreg tls ca create')", err)
	}
	if ca.KeyPEM, err = os.ReadFile(*keyFile); err != nil {
		return fmt.Errorf("read CA key: %w", err)
	}
	kind := "client"
	if *server {
		kind = "server"
	}
	// The first free <cluster>-<kind>-plugreg-<n>.pem, as Consul numbers them.
	var certPath, keyPath string
	for n := 0; ; n++ {
		certPath = filepath.Join(*dir, fmt.Sprintf("%s-%s-plugreg-%d.pem", *cluster, kind, n))
		keyPath = filepath.Join(*dir, fmt.Sprintf("%s-%s-plugreg-%d-key.pem", *cluster, kind, n))
		if refuseOverwrite(certPath, keyPath) == nil {
			break
		}
	}
	kp, err := tlsutil.CreateCert(ca, o)
	if err != nil {
		return err
	}
	if err := kp.WriteFiles(certPath, keyPath); err != nil {
		return err
	}
	name := tlsutil.Config{ClusterName: *cluster}.ClientName()
	if *server {
		name = tlsutil.Config{ClusterName: *cluster}.ServerName()
	}
	fmt.Printf("==> %s certificate for %s: %s\n==> key: %s\n", kind, name, certPath, keyPath)
	return nil
}

// refuseOverwrite fails if the pair at certPath and keyPath exists, or
// its key does: a PKI file is never replaced by accident. An empty key
// with no certificate is what a power cut can leave of an older release's
// create (WriteFiles writes each half whole or not at all): it holds
// nothing, and is replaced.
func refuseOverwrite(certPath, keyPath string) error {
	if _, err := os.Stat(certPath); err == nil {
		return fmt.Errorf("%s exists; not overwriting it", certPath)
	}
	switch info, err := os.Stat(keyPath); {
	case err != nil, info.Size() == 0:
		return nil
	}
	return fmt.Errorf("%s exists without its certificate %s (a create cut short?); not overwriting a key: remove it to create a new pair", keyPath, certPath)
}

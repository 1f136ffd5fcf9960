// Package tlsutil builds every tls.Config of Trellis (the public ports,
// the server-to-server port, and the clients of both) from three files,
// -tls-ca-file, -tls-cert-file and -tls-key-file, and creates the cluster
// CA and the certificates an operator hands out (`trellis tls ca create`,
// `trellis tls cert create`).
//
// A Configurator loads and checks the files (New), hands out tls.Configs
// for each role (IncomingServerConfig, IncomingPublicConfig,
// OutgoingServerConfig, OutgoingClientConfig), and swaps the files for new
// ones on Reload, which WatchSIGHUP calls on every SIGHUP.
//
// # Design decisions
//
//   - Names, after Consul's. Every server certificate of datacenter dc1
//     names server.dc1.trellis (Consul: server.dc1.consul), and that name,
//     not an address, is what makes a peer a server: servers are dialed by
//     IP address, addresses move, and a certificate the CA signed for an
//     agent must not pass for a server's however it is dialed. So both
//     sides of the server-to-server port, and agents dialing a public
//     port, check for exactly that name (a wildcard such as *.dc1.trellis
//     does not count). A server certificate also names localhost and
//     127.0.0.1, so that a CLI or curl on the server's own machine
//     verifies it by the address it dials, with no extra flag; other
//     addresses are added with -additional-dnsname and
//     -additional-ipaddress. A client certificate names client.dc1.trellis
//     and is valid for client authentication only: even with a name
//     added, it can never serve as a server's.
//   - Fail at start, not at the first handshake. New refuses what would
//     make every handshake fail later: a missing file, a key that is not
//     the certificate's, a certificate the CA did not sign, one that has
//     expired, and on a server a certificate without server.<dc>.<domain>
//     or without both server and client authentication (a server dials
//     other servers with the certificate it serves). Each error is a
//     *FileError naming the flag, the path and the reason.
//   - Reload without restarting a listener. The tls.Configs hold no
//     certificate and no CA pool: GetCertificate, GetClientCertificate and
//     VerifyConnection read the material loaded now, an atomic pointer
//     that Reload replaces whole, so a new certificate or CA is used from
//     the next handshake on and connections already open go on. Peers are
//     verified in VerifyConnection (with RequireAnyClientCert on servers
//     and InsecureSkipVerify on clients turning Go's own check off),
//     because Go's check would use the CA pool fixed when the tls.Config
//     was made. A reload that fails any check keeps the material before
//     it and returns the error: a half-copied file never takes a cluster
//     down.
//   - TLS 1.3 only, on every link. Every Trellis process is built from
//     this code, so there is no old peer to be compatible with, and 1.3
//     leaves no cipher suite to choose.
//   - ECDSA P-256 keys and certificates from crypto/x509 alone: the
//     curve every TLS stack accepts, small and fast to sign with. Serial
//     numbers are 127 random bits. The CA lives five years and a leaf one
//     by default, as Consul's do; a leaf that would outlive its CA is
//     refused, since it would stop verifying before the date it shows. A
//     CA may be name-constrained to its domain and localhost, so that its
//     key cannot mint certificates for other sites.
//   - The public ports ask for a client certificate and require none:
//     clients are authenticated by their ACL tokens there, and an agent
//     with auto-encrypt has no certificate until the servers sign its
//     leaf. A certificate that is presented must verify, as a client
//     certificate of the cluster CA or as an agent leaf of the Connect CA
//     (spiffe://<td>/agent/client/dc/<dc>/id/<instance>, of this
//     datacenter), whose roots a server hands over with SetConnectRoots as
//     they change; anything else ends the handshake. Clients present the
//     leaf with OutgoingClientConfigWith or PresentingLeaf, read at each
//     handshake, so a renewed leaf needs no reconnection.
//   - `trellis dev` needs no files: NewDevBundle makes a CA and a server
//     and a client certificate in memory, valid for a day, and
//     NewFromBundle makes a Configurator of them.
package tlsutil

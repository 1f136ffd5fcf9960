// Package tlsutil builds every tls.Config of Trellis (the public ports,
// the server-to-server port, and the clients of both) from three files,
// -tls-ca-file, -tls-cert-file and -tls-key-file, and creates the cluster
// CA and the certificates an operator hands out (`trellis tls ca create`,
// `trellis tls cert create`).
//
// A Configurator loads and checks the files (New), hands out tls.Configs
// for each role (ServerPort for the server ports, IncomingPublicConfig,
// OutgoingClientConfig), and swaps the files for new ones on Reload, which
// WatchSIGHUP calls on every SIGHUP. On a server it also holds what the
// Connect CA gives: the CA's roots (SetConnectRoots) and the server's own
// leaf of the CA (SetConnectServerCertificate), which it presents instead
// of its file to the peers that ask for it.
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
//   - Servers take their certificates from the Connect CA once it is up,
//     and from files before: the first servers form Raft before any root
//     exists, and a new server joins with no state. So the files stay,
//     and each connection of the server ports picks (ServerPort): the
//     dialer asks by SNI for ConnectServerName when it knows the CA's
//     roots, and the server dialed presents its Connect leaf only then;
//     the server dialed names in its certificate request (ClientCAs) the
//     CAs whose server leaves it takes, and the dialer presents its
//     Connect leaf only when they include its leaf's issuer. Standard TLS
//     negotiation: no peer is ever shown a certificate it cannot check.
//     Either kind is accepted from a peer; an agent's or a service's leaf
//     never is.
//   - A Connect server leaf is a server leaf of this datacenter, signed by
//     this datacenter's CA: its SPIFFE id names this datacenter, and its
//     issuer holds the key of one of the datacenter's signing CAs
//     (SetConnectRoots' signers: the primary's roots, a secondary's own
//     intermediate; IssuedByOneOf). Chaining to a root is not enough: any
//     CA certificate that chains to one (another datacenter's
//     intermediate) could otherwise mint a server of every datacenter.
//   - A connection that is up never looks at certificates again, so when
//     a server becomes ready to speak Connect (a leaf and the roots) it
//     closes its Raft links (Links), once, and Raft opens them again with
//     the leaf, retrying what was in flight. The server RPCs' links are
//     not closed, since a gRPC client takes a closed connection for a
//     call of unknown outcome: the server ends each gracefully at its
//     maximum age (GOAWAY; calls in flight finish), and its client opens
//     the next with the leaf. trellis_tls_server_links counts the live
//     links by what their peer presented. Renewals and rotations close
//     nothing: a link keeps the leaf it was opened with, which stays
//     valid and trusted until it expires or its root is pruned.
//   - `trellis dev` needs no files: NewDevBundle makes a CA and a server
//     and a client certificate in memory, valid for a day, and
//     NewFromBundle makes a Configurator of them.
package tlsutil

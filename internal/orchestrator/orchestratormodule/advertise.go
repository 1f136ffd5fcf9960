package orchestratormodule

import "net"

// advertisedPublic is the public gRPC address agents are told is the
// leader's: the listen address, or, when it listens on every interface,
// its port on the host other servers reach this one at. In memory there
// is no server-to-server address, and the listen address is kept.
func advertisedPublic(listen, serverAddr string) string {
	if serverAddr == "" {
		return listen
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return listen
	}
	shost, _, err := net.SplitHostPort(serverAddr)
	if err != nil {
		return listen
	}
	return net.JoinHostPort(shost, port)
}

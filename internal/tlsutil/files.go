package tlsutil

import "fmt"

// CAFileNames are the files `trellis tls ca create` writes for a domain:
// trellis-agent-ca.pem and trellis-agent-ca-key.pem, after Consul's
// consul-agent-ca.pem, so that an operator who knows one knows the other.
func CAFileNames(domain string) (cert, key string) {
	return domain + "-agent-ca.pem", domain + "-agent-ca-key.pem"
}

// NextCertFileNames picks the files of the next leaf certificate:
// dc1-server-trellis-0.pem and dc1-server-trellis-0-key.pem, with the
// lowest number for which neither file exists, so that creating the
// certificates of three servers in one directory gives -0, -1 and -2 and
// never overwrites one.
func NextCertFileNames(dc string, kind Kind, domain string, exists func(string) bool) (cert, key string) {
	for i := 0; ; i++ {
		prefix := fmt.Sprintf("%s-%s-%s-%d", dc, kind, domain, i)
		cert, key = prefix+".pem", prefix+"-key.pem"
		if !exists(cert) && !exists(key) {
			return cert, key
		}
	}
}

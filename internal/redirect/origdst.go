package redirect

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// soOriginalDst is SO_ORIGINAL_DST of <linux/netfilter_ipv4.h>, and
// IP6T_SO_ORIGINAL_DST of <linux/netfilter_ipv6/ip6_tables.h>, the same
// number at the IPv6 level.
const soOriginalDst = 80

// OriginalDst is where a connection that REDIRECT brought to a listener
// (the proxy's outbound port) was first sent, read from the kernel's
// connection tracking with getsockopt(SO_ORIGINAL_DST).
func OriginalDst(conn *net.TCPConn) (netip.AddrPort, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	local, _ := netip.ParseAddrPort(conn.LocalAddr().String())
	v4 := local.Addr().Unmap().Is4()
	var dst netip.AddrPort
	var opErr error
	err = raw.Control(func(fd uintptr) {
		if v4 {
			// sockaddr_in (16 bytes) fits in the 20 bytes of an
			// ipv6_mreq, the smallest buffer x/sys/unix reads into.
			m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, soOriginalDst)
			if err != nil {
				opErr = err
				return
			}
			b := m.Multiaddr[:] // family (2), port (2, big-endian), address (4)
			dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4]))
			return
		}
		// sockaddr_in6 (28 bytes) is the start of an ip6_mtuinfo (32).
		m, err := unix.GetsockoptIPv6MTUInfo(int(fd), unix.SOL_IPV6, soOriginalDst)
		if err != nil {
			opErr = err
			return
		}
		// The port is in network order in memory: put its bytes back.
		var port [2]byte
		binary.NativeEndian.PutUint16(port[:], m.Addr.Port)
		dst = netip.AddrPortFrom(netip.AddrFrom16(m.Addr.Addr).Unmap(), binary.BigEndian.Uint16(port[:]))
	})
	if err == nil {
		err = opErr
	}
	if errors.Is(err, unix.ENOENT) {
		return netip.AddrPort{}, fmt.Errorf("no original destination: the connection was not redirected (%w)", err)
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("getsockopt SO_ORIGINAL_DST: %w", err)
	}
	return dst, nil
}

// Package egress decides which network addresses the manager's outbound
// connections may reach. The manager dials URLs that namespace users write
// (a BotPool's Coolify URL, a Bot's callbackURL); without a policy those URLs
// turn the manager into a proxy into the cluster network, the node's loopback
// services and the cloud metadata endpoint (SSRF).
//
// The policy is enforced at connect time, on the address actually dialled,
// by a net.Dialer Control hook: checking a host name before the request
// would be defeated by DNS rebinding (a name that resolves to a public
// address for the check and to 127.0.0.1 for the connection).
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// ErrRefused is wrapped by every error the policy returns for a refused
// destination, so callers can tell "not allowed" from "unreachable".
var ErrRefused = errors.New("egress: destination refused")

// Policy decides which addresses outbound connections may reach.
type Policy struct {
	// Allowed are prefixes let through even though a rule below would refuse them (e.g. the demo's 127.0.0.0/8).
	Allowed []netip.Prefix
	// AllowPrivate lets private ranges through (RFC 1918, fc00::/7, 100.64.0.0/10): cluster and LAN addresses.
	AllowPrivate bool
}

var (
	// thisNetwork is 0.0.0.0/8: "this host on this network"; Linux
	// connects 0.0.0.0 to the local host.
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	// sharedAddressSpace is RFC 6598's carrier-grade NAT range, which
	// several Kubernetes distributions use for pods and services.
	sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10")
	broadcast          = netip.MustParseAddr("255.255.255.255")
)

// Check returns nil when ip may be dialled, or an error wrapping ErrRefused
// naming the address and the rule that refused it.
func (p Policy) Check(ip netip.Addr) error {
	if !ip.IsValid() {
		return fmt.Errorf("%w: invalid address", ErrRefused)
	}
	// An IPv4-mapped IPv6 address (::ffff:127.0.0.1) reaches the IPv4
	// address: judge that one.
	u := ip.Unmap().WithZone("")
	for _, pfx := range p.Allowed {
		if pfx.Contains(u) || pfx.Contains(ip.WithZone("")) {
			return nil
		}
	}
	refuse := func(rule string) error {
		return fmt.Errorf("%w: %s is %s", ErrRefused, ip, rule)
	}
	// An IPv6 address that carries an IPv4 one reaches it through a translator or tunnel
	// (NAT64, 6to4) or by the host's own reading (IPv4-compatible, IPv4-translated): judged
	// as that IPv4 address, 64:ff9b::7f00:1 is 127.0.0.1.
	for _, v4 := range embeddedIPv4(u) {
		if err := p.Check(v4); err != nil {
			return fmt.Errorf("%w: %s embeds %s (%w)", ErrRefused, ip, v4, err)
		}
	}
	switch {
	case u.IsLoopback():
		return refuse("a loopback address")
	case u.IsUnspecified(), u.Is4() && thisNetwork.Contains(u):
		return refuse("an unspecified address")
	case u.IsLinkLocalUnicast():
		return refuse("a link-local address (this includes cloud metadata endpoints)")
	case u.IsLinkLocalMulticast(), u.IsInterfaceLocalMulticast(), u.IsMulticast():
		return refuse("a multicast address")
	case u == broadcast:
		return refuse("the broadcast address")
	}
	if !p.AllowPrivate {
		switch {
		case u.IsPrivate():
			return refuse("a private address (allow private networks to reach it)")
		case sharedAddressSpace.Contains(u):
			return refuse("a shared (carrier-grade NAT) address (allow private networks to reach it)")
		}
	}
	return nil
}

var (
	// nat64WellKnown is RFC 6052's well-known NAT64 prefix: the IPv4 address is the last 32 bits.
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")
	// nat64Local is RFC 8215's local-use NAT64 prefix. A network picks its own prefix length
	// in it (RFC 6052: /48, /56, /64 or /96 fit), which the manager cannot know: each reading
	// that could be one (RFC 6052's suffix after the IPv4 address is zero) is judged.
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")
	// sixToFour is RFC 3056's 6to4: the IPv4 address is bits 16–47.
	sixToFour = netip.MustParsePrefix("2002::/16")
	// ipv4Compatible is RFC 4291's deprecated ::a.b.c.d (:: and ::1 are IPv6's own).
	ipv4Compatible = netip.MustParsePrefix("::/96")
	// ipv4Translated is RFC 2765's SIIT ::ffff:0:a.b.c.d.
	ipv4Translated = netip.MustParsePrefix("::ffff:0:0:0/96")
)

// embeddedIPv4 returns the IPv4 addresses an IPv6 address carries by a standard embedding,
// none for an IPv4 address or one that carries none.
func embeddedIPv4(ip netip.Addr) []netip.Addr {
	if !ip.Is6() {
		return nil
	}
	a := ip.As16()
	v4 := func(b ...byte) netip.Addr { return netip.AddrFrom4([4]byte{b[0], b[1], b[2], b[3]}) }
	switch {
	case nat64WellKnown.Contains(ip), ipv4Translated.Contains(ip):
		return []netip.Addr{v4(a[12:16]...)}
	case ipv4Compatible.Contains(ip):
		if ip.IsUnspecified() || ip.IsLoopback() {
			return nil
		}
		return []netip.Addr{v4(a[12:16]...)}
	case sixToFour.Contains(ip):
		return []netip.Addr{v4(a[2:6]...)}
	case nat64Local.Contains(ip):
		// RFC 6052 section 2.2: bits 64–71 (byte 8) are zero and skipped, and the suffix
		// after the address is zero.
		// A reading in 0.0.0.0/8 is the zero filler of another length's, not a destination
		// a translator serves: skipped, or every address under /48, /56 or /64 is refused.
		var out []netip.Addr
		if r := v4(a[12:16]...); !thisNetwork.Contains(r) {
			out = append(out, r) // /96
		}
		for _, r := range []struct {
			addr   [4]int
			suffix int // the suffix's first byte
		}{{[4]int{6, 7, 9, 10}, 11}, {[4]int{7, 9, 10, 11}, 12}, {[4]int{9, 10, 11, 12}, 13}} { // /48, /56, /64
			if v := v4(a[r.addr[0]], a[r.addr[1]], a[r.addr[2]], a[r.addr[3]]); a[8] == 0 && allZero(a[r.suffix:]) && !thisNetwork.Contains(v) {
				out = append(out, v)
			}
		}
		return out
	}
	return nil
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// Dialer returns a copy of base (a default dialer when nil) whose Control
// hook checks every address it connects to, after name resolution, so DNS
// rebinding cannot route around the policy. A Control or ControlContext hook
// already set on base still runs, after the check.
func (p Policy) Dialer(base *net.Dialer) *net.Dialer {
	var d net.Dialer
	if base != nil {
		d = *base
	} else {
		d = net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	}
	prevCtx, prev := d.ControlContext, d.Control
	d.Control = nil
	d.ControlContext = func(ctx context.Context, network, address string, c syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: cannot parse dialled address %q: %w", ErrRefused, address, err)
		}
		if err := p.Check(ap.Addr()); err != nil {
			return err
		}
		switch {
		case prevCtx != nil:
			return prevCtx(ctx, network, address, c)
		case prev != nil:
			return prev(network, address, c)
		}
		return nil
	}
	return &d
}

// Transport returns a clone of http.DefaultTransport that dials through
// Dialer and ignores proxy environment variables: a proxy would make the
// connection to an allowed address and carry the request anywhere.
func (p Policy) Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = p.Dialer(nil).DialContext
	return t
}

// maxRedirects matches net/http's default limit.
const maxRedirects = 10

// SameHostRedirects is an http.Client CheckRedirect that follows a redirect
// only to the same scheme, host and port as the original request: a
// redirect to another host would let a server the user named send the
// manager's request (and its Authorization header's destination choice)
// somewhere else, past any check made on the original URL.
func SameHostRedirects(req *http.Request, via []*http.Request) error {
	if len(via) == 0 {
		return nil
	}
	if len(via) >= maxRedirects {
		return fmt.Errorf("egress: stopped after %d redirects", maxRedirects)
	}
	orig := via[0].URL
	if !strings.EqualFold(req.URL.Scheme, orig.Scheme) || hostPort(req.URL.Scheme, req.URL.Host) != hostPort(orig.Scheme, orig.Host) {
		return fmt.Errorf("%w: redirect from %s://%s to %s://%s (another scheme or host)",
			ErrRefused, orig.Scheme, orig.Host, req.URL.Scheme, req.URL.Host)
	}
	return nil
}

// hostPort is host:port in lower case with the scheme's default port made
// explicit, so https://a and https://A:443 compare equal.
func hostPort(scheme, host string) string {
	host = strings.ToLower(host)
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	port := "80"
	if strings.EqualFold(scheme, "https") {
		port = "443"
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), port)
}

// ParsePrefixes parses a comma-separated list of CIDR prefixes (a bare
// address means that one address) for a command-line flag. An empty or
// blank list is nil.
func ParsePrefixes(csv string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(csv, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("%q is neither a CIDR prefix (10.0.0.0/8) nor an IP address", f)
			}
			if a.Zone() != "" {
				return nil, fmt.Errorf("%q: zoned addresses are not supported", f)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		pfx, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR prefix like 10.0.0.0/8: %w", f, err)
		}
		if m := pfx.Masked(); m != pfx {
			return nil, fmt.Errorf("%q has bits set past the prefix length; did you mean %s?", f, m)
		}
		out = append(out, pfx)
	}
	return out, nil
}

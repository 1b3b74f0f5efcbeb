package egress

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"testing"
)

func TestCheck(t *testing.T) {
	strict := Policy{}
	private := Policy{AllowPrivate: true}
	loopbackAllowed := Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	clusterAllowed := Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}}
	tests := []struct {
		name   string
		policy Policy
		ip     string
		rule   string // "" means allowed
	}{
		{"public v4", strict, "93.184.216.34", ""},
		{"public v6", strict, "2606:2800:220:1:248:1893:25c8:1946", ""},
		{"loopback", strict, "127.0.0.1", "loopback"},
		{"loopback elsewhere in 127/8", strict, "127.5.6.7", "loopback"},
		{"loopback v6", strict, "::1", "loopback"},
		{"mapped loopback", strict, "::ffff:127.0.0.1", "loopback"},
		{"metadata", strict, "169.254.169.254", "link-local"},
		{"mapped metadata", strict, "::ffff:169.254.169.254", "link-local"},
		{"link-local v6", strict, "fe80::1", "link-local"},
		{"link-local v6 zoned", strict, "fe80::1%eth0", "link-local"},
		{"unspecified", strict, "0.0.0.0", "unspecified"},
		{"this network", strict, "0.1.2.3", "unspecified"},
		{"unspecified v6", strict, "::", "unspecified"},
		{"multicast", strict, "224.0.0.1", "multicast"},
		{"multicast v6", strict, "ff02::1", "multicast"},
		{"broadcast", strict, "255.255.255.255", "broadcast"},
		{"rfc1918 10", strict, "10.0.0.1", "private"},
		{"rfc1918 172", strict, "172.16.5.4", "private"},
		{"rfc1918 192", strict, "192.168.1.1", "private"},
		{"mapped rfc1918", strict, "::ffff:10.0.0.1", "private"},
		{"ula", strict, "fd00::1", "private"},
		{"cgnat", strict, "100.64.0.1", "carrier-grade NAT"},
		{"just outside cgnat", strict, "100.128.0.1", ""},
		{"private allowed", private, "10.0.0.1", ""},
		{"ula allowed", private, "fd12::1", ""},
		{"cgnat allowed", private, "100.100.1.1", ""},
		{"private still refuses loopback", private, "127.0.0.1", "loopback"},
		{"private still refuses metadata", private, "169.254.169.254", "link-local"},
		{"allowed loopback", loopbackAllowed, "127.0.0.1", ""},
		{"allowed loopback mapped", loopbackAllowed, "::ffff:127.0.0.1", ""},
		{"allowed loopback does not allow v6 loopback", loopbackAllowed, "::1", "loopback"},
		{"allowed loopback does not allow private", loopbackAllowed, "10.0.0.1", "private"},
		{"allowed cluster range", clusterAllowed, "10.96.0.10", ""},
		{"outside allowed cluster range", clusterAllowed, "10.0.0.1", "private"},
		{"invalid", strict, "", "invalid"},
		// IPv6 forms that carry an IPv4 address reach it: judged as it (issue 30).
		{"nat64 loopback", strict, "64:ff9b::127.0.0.1", "embeds 127.0.0.1"},
		{"nat64 metadata", strict, "64:ff9b::a9fe:a9fe", "link-local"},
		{"nat64 private", strict, "64:ff9b::10.0.0.1", "private"},
		{"nat64 public", strict, "64:ff9b::93.184.216.34", ""},
		{"nat64 private allowed", private, "64:ff9b::10.0.0.1", ""},
		{"nat64 allowed cluster range", clusterAllowed, "64:ff9b::10.96.0.10", ""},
		{"local nat64 /96 loopback", strict, "64:ff9b:1::127.0.0.1", "loopback"},
		{"local nat64 /48 metadata", strict, "64:ff9b:1:a9fe:a9:fe00::", "link-local"},
		{"local nat64 /64 private", strict, "64:ff9b:1:0:a:0:100:0", "private"},
		{"local nat64 /96 public", strict, "64:ff9b:1::5db8:d822", ""},
		{"local nat64 /96 public, network bits set", strict, "64:ff9b:1:abcd::5db8:d822", ""},
		{"local nat64 /48 public", strict, "64:ff9b:1:5db8:d8:2200::", ""},
		{"6to4 loopback", strict, "2002:7f00:1::1", "embeds 127.0.0.1"},
		{"6to4 metadata", strict, "2002:a9fe:a9fe::", "link-local"},
		{"6to4 public", strict, "2002:5db8:d822::1", ""},
		{"ipv4-compatible loopback", strict, "::127.0.0.1", "loopback"},
		{"ipv4-compatible metadata", strict, "::169.254.169.254", "link-local"},
		{"ipv4-translated private", strict, "::ffff:0:192.168.1.1", "private"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ip netip.Addr
			if tt.ip != "" {
				ip = netip.MustParseAddr(tt.ip)
			}
			err := tt.policy.Check(ip)
			if tt.rule == "" {
				if err != nil {
					t.Fatalf("Check(%s) = %v, want allowed", tt.ip, err)
				}
				return
			}
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("Check(%s) = %v, want an error wrapping ErrRefused", tt.ip, err)
			}
			if !strings.Contains(err.Error(), tt.rule) || (tt.ip != "" && !strings.Contains(err.Error(), ip.String())) {
				t.Fatalf("Check(%s) = %q, want it to name the address and %q", tt.ip, err, tt.rule)
			}
		})
	}
}

// TestDialerRefusesAtConnectTime dials a real loopback listener: the
// strict policy refuses the connection, an Allowed exception lets it
// through, and a Control hook already on the base dialer still runs.
func TestDialerRefusesAtConnectTime(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	ctx := context.Background()

	_, err = Policy{}.Dialer(nil).DialContext(ctx, "tcp", ln.Addr().String())
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("strict dial to loopback: err = %v, want ErrRefused", err)
	}
	// By name: the check is on the resolved address, not the name.
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	_, err = Policy{}.Dialer(nil).DialContext(ctx, "tcp4", net.JoinHostPort("localhost", port))
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("strict dial to localhost: err = %v, want ErrRefused", err)
	}

	baseRan := false
	base := &net.Dialer{Control: func(string, string, syscall.RawConn) error { baseRan = true; return nil }}
	allow := Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	c, err := allow.Dialer(base).DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("allowed dial: %v", err)
	}
	_ = c.Close()
	if !baseRan {
		t.Fatal("the base dialer's Control hook did not run")
	}
	if base.ControlContext != nil {
		t.Fatal("Dialer modified its base")
	}
}

func TestTransport(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	t.Setenv("HTTP_PROXY", "http://proxy.invalid:3128")
	tr := Policy{}.Transport()
	if tr.Proxy != nil {
		t.Fatal("Transport must not use a proxy")
	}
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err == nil {
		_ = resp.Body.Close()
	}
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("GET loopback through the strict transport: err = %v, want ErrRefused", err)
	}
	tr = Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}.Transport()
	resp, err = (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		t.Fatalf("GET through an allowing transport: %v", err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestSameHostRedirects(t *testing.T) {
	req := func(s string) *http.Request {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return &http.Request{URL: u}
	}
	tests := []struct {
		from, to string
		ok       bool
	}{
		{"https://coolify.example/api/v1/x", "https://coolify.example/api/v1/y", true},
		{"https://coolify.example/x", "https://COOLIFY.example:443/y", true},
		{"http://coolify.example/x", "http://coolify.example:80/y", true},
		{"https://coolify.example/x", "https://169.254.169.254/latest/meta-data", false},
		{"https://coolify.example/x", "http://coolify.example/x", false},
		{"https://coolify.example/x", "https://coolify.example:8443/x", false},
		{"https://coolify.example/x", "https://evil.example/x", false},
	}
	for _, tt := range tests {
		err := SameHostRedirects(req(tt.to), []*http.Request{req(tt.from)})
		if tt.ok && err != nil {
			t.Errorf("%s -> %s: %v, want followed", tt.from, tt.to, err)
		}
		if !tt.ok && !errors.Is(err, ErrRefused) {
			t.Errorf("%s -> %s: %v, want ErrRefused", tt.from, tt.to, err)
		}
	}
	via := make([]*http.Request, maxRedirects)
	for i := range via {
		via[i] = req("https://coolify.example/x")
	}
	if err := SameHostRedirects(req("https://coolify.example/x"), via); err == nil {
		t.Error("a redirect loop was followed past the limit")
	}
}

// TestSameHostRedirectsEndToEnd: a server redirecting to another host is
// not followed; the client gets an error instead of the other host's answer.
func TestSameHostRedirectsEndToEnd(t *testing.T) {
	otherHit := false
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { otherHit = true }))
	defer other.Close()
	// Same address, another host name: a different host:port to the client.
	otherURL := strings.Replace(other.URL, "127.0.0.1", "localhost", 1)
	srv := httptest.NewServer(http.RedirectHandler(otherURL, http.StatusFound))
	defer srv.Close()
	c := &http.Client{CheckRedirect: SameHostRedirects}
	resp, err := c.Get(srv.URL)
	if err == nil {
		_ = resp.Body.Close()
	}
	if !errors.Is(err, ErrRefused) || otherHit {
		t.Fatalf("err = %v, other host hit = %v; want ErrRefused and no hit", err, otherHit)
	}
}

func TestParsePrefixes(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{"", nil, ""},
		{"  ", nil, ""},
		{"10.0.0.0/8,127.0.0.1/32", []string{"10.0.0.0/8", "127.0.0.1/32"}, ""},
		{" 10.0.0.0/8 , fd00::/8 ,", []string{"10.0.0.0/8", "fd00::/8"}, ""},
		{"127.0.0.1", []string{"127.0.0.1/32"}, ""},
		{"::1", []string{"::1/128"}, ""},
		{"10.1.2.3/8", nil, "did you mean 10.0.0.0/8"},
		{"10.0.0.0/33", nil, "not a CIDR prefix"},
		{"example.com", nil, "neither a CIDR prefix"},
		{"fe80::1%eth0", nil, "zoned"},
	}
	for _, tt := range tests {
		got, err := ParsePrefixes(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParsePrefixes(%q) err = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParsePrefixes(%q): %v", tt.in, err)
			continue
		}
		var gs []string
		for _, p := range got {
			gs = append(gs, p.String())
		}
		if strings.Join(gs, ",") != strings.Join(tt.want, ",") || (tt.want == nil) != (got == nil) {
			t.Errorf("ParsePrefixes(%q) = %v, want %v", tt.in, gs, tt.want)
		}
	}
}

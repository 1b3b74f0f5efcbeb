package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// hardeningOptions are the settings that narrow what the manager exposes and may touch: the
// namespaces it watches, TLS on the bot API, and authenticated metrics. They live in their
// own block so that they read (and merge) as one piece.
type hardeningOptions struct {
	// watchNamespaces, comma-separated, restricts every informer (and so every controller and
	// the bot API) to those namespaces; empty watches all. With it the chart grants Roles in
	// those namespaces only, instead of cluster-wide Secret access.
	watchNamespaces string
	// botAPITLSCertFile and botAPITLSKeyFile make the bot API serve HTTPS with that key pair,
	// reloaded when the files change (a renewed Secret).
	botAPITLSCertFile string
	botAPITLSKeyFile  string
	// allowInsecureBotAPIURL accepts an http:// --bot-api-url whose host is outside the
	// cluster: bearer tokens and meeting URLs would then cross that network in clear.
	allowInsecureBotAPIURL bool
	// metricsSecure serves /metrics over HTTPS to callers the API server authenticates
	// (TokenReview) and authorizes (SubjectAccessReview, GET on the /metrics URL).
	metricsSecure bool
}

func (h *hardeningOptions) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&h.watchNamespaces, "watch-namespaces", "", "Comma-separated namespaces whose BotPools, slots, Bots and Secrets the manager watches; empty watches every namespace.")
	fs.StringVar(&h.botAPITLSCertFile, "bot-api-tls-cert-file", "", "PEM certificate (chain) the bot API serves HTTPS with, reloaded when the file changes; empty serves plain HTTP.")
	fs.StringVar(&h.botAPITLSKeyFile, "bot-api-tls-key-file", "", "PEM private key of --bot-api-tls-cert-file.")
	fs.BoolVar(&h.allowInsecureBotAPIURL, "allow-insecure-bot-api-url", false, "Accept an http:// --bot-api-url whose host is outside the cluster (slot tokens and meeting URLs then travel in clear).")
	fs.BoolVar(&h.metricsSecure, "metrics-secure", false, "Serve metrics over HTTPS, only to callers allowed GET on /metrics (TokenReview and SubjectAccessReview against the API server).")
}

func (h hardeningOptions) validate(o options) error {
	var errs []error
	for _, ns := range h.namespaces() {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--watch-namespaces: %q is not a namespace name: %s", ns, strings.Join(msgs, "; ")))
		}
	}
	if (h.botAPITLSCertFile == "") != (h.botAPITLSKeyFile == "") {
		errs = append(errs, errors.New("--bot-api-tls-cert-file and --bot-api-tls-key-file go together: set both or neither"))
	}
	if u, err := url.Parse(o.botAPIURL); err == nil && u.Scheme == "http" && u.Host != "" &&
		!h.allowInsecureBotAPIURL && !inClusterHost(u.Hostname()) {
		errs = append(errs, fmt.Errorf("--bot-api-url %q: plain http to a host outside the cluster would send slot tokens and meeting URLs in clear; "+
			"use https (--bot-api-tls-cert-file, or a TLS proxy in front), or pass --allow-insecure-bot-api-url", o.botAPIURL))
	}
	if o.pprofAddr != "" {
		// Profiles expose memory contents (heap) and let a caller burn CPU: never to the network.
		if host, _, err := net.SplitHostPort(o.pprofAddr); err != nil || !isLoopback(host) {
			errs = append(errs, fmt.Errorf("--pprof-bind-address %q: bind profiling to a loopback address such as 127.0.0.1:6060 (kubectl port-forward reaches it)", o.pprofAddr))
		}
	}
	return errors.Join(errs...)
}

// namespaces lists --watch-namespaces, trimmed, without empties and duplicates.
func (h hardeningOptions) namespaces() []string {
	var out []string
	for ns := range strings.SplitSeq(h.watchNamespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" && !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out
}

// cacheNamespaces is cache.Options.DefaultNamespaces: nil for every namespace.
func (h hardeningOptions) cacheNamespaces() map[string]cache.Config {
	nss := h.namespaces()
	if len(nss) == 0 {
		return nil
	}
	m := make(map[string]cache.Config, len(nss))
	for _, ns := range nss {
		m[ns] = cache.Config{}
	}
	return m
}

// metricsOptions serves metrics on addr ("0" disables them), over HTTPS with authentication
// and authorization when --metrics-secure is set. Without a certificate of its own the server
// generates a self-signed one in memory, which is what Prometheus scrapes with
// insecureSkipVerify; the bearer token it sends is what protects the endpoint.
func (h hardeningOptions) metricsOptions(addr string) metricsserver.Options {
	o := metricsserver.Options{BindAddress: addr}
	if h.metricsSecure {
		o.SecureServing = true
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return o
}

// inClusterHost reports whether a bot API URL's host is one whose traffic stays inside the
// cluster or a private network, where plain http is an operator's choice rather than an
// exposure:
//   - a Service name: ending in .svc or .svc.cluster.local (a cluster with another domain
//     uses the .svc form, or --allow-insecure-bot-api-url);
//   - a single-label name (no dot), which only search domains of a private resolver can
//     resolve;
//   - localhost, and IP literals that are loopback, private (10/8, 172.16/12, 192.168/16,
//     fc00::/7), shared address space (100.64/10, common for pod and service ranges) or
//     link-local.
//
// Every other name or address (a public DNS name, a public IP) is outside.
func inClusterHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		return ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || sharedAddressSpace.Contains(ip)
	}
	return host == "localhost" || !strings.Contains(host, ".") ||
		strings.HasSuffix(host, ".svc") || strings.HasSuffix(host, ".svc.cluster.local")
}

// sharedAddressSpace is RFC 6598's 100.64.0.0/10, used by carrier-grade NAT and by many
// clusters for pod and service addresses; never routed on the internet.
var sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10")

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

//! Who a client is: the identity its failed authentications and its connections count under.
//!
//! A request's client is the socket's peer, unless that peer is a trusted proxy: then it is the
//! right-most hop of the proxy's forwarding header that is not itself a trusted proxy. Addresses
//! are keyed by IPv4 address or IPv6 /64, because one host usually holds a whole /64.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use axum::http::HeaderMap;
use ipnet::IpNet;

/// The identity a client is counted under: an IPv4 address, or the /64 of an IPv6 address.
/// IPv4-mapped IPv6 addresses are folded to IPv4, so that one client has one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientKey(IpAddr);

impl ClientKey {
    pub fn of(address: IpAddr) -> ClientKey {
        ClientKey(match address.to_canonical() {
            IpAddr::V6(v6) => {
                let [a, b, c, d, ..] = v6.segments();
                IpAddr::V6(Ipv6Addr::new(a, b, c, d, 0, 0, 0, 0))
            }
            v4 => v4,
        })
    }
}

impl std::fmt::Display for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
            IpAddr::V4(v4) => f.write_str(dotted(v4.octets(), &mut [0; 15])),
        }
    }
}

/// `octets` in dotted decimal, as `Ipv4Addr` writes them, into `text`. Written digit by digit:
/// `Ipv4Addr`'s own `Display` formats each octet through the formatting machinery, which cost
/// about 1.3k instructions for the client of every hook request's record.
fn dotted(octets: [u8; 4], text: &mut [u8; 15]) -> &str {
    let mut len = 0;
    for (i, octet) in octets.into_iter().enumerate() {
        if i > 0 {
            text[len] = b'.';
            len += 1;
        }
        if octet >= 100 {
            text[len] = b'0' + octet / 100;
            len += 1;
        }
        if octet >= 10 {
            text[len] = b'0' + octet / 10 % 10;
            len += 1;
        }
        text[len] = b'0' + octet % 10;
        len += 1;
    }
    std::str::from_utf8(&text[..len]).expect("digits and dots are ASCII")
}

/// Which header a trusted proxy writes the client's address into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: <client>, <proxy>, ...` (nginx, HAProxy, Envoy, Caddy, Traefik, most
    /// load balancers).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=<client>;proto=https, for=...`.
    Forwarded,
}

impl ForwardedHeader {
    /// The configuration's names for the two.
    pub fn named(name: &str) -> Option<ForwardedHeader> {
        match name.to_ascii_lowercase().as_str() {
            "x-forwarded-for" => Some(ForwardedHeader::XForwardedFor),
            "forwarded" => Some(ForwardedHeader::Forwarded),
            _ => None,
        }
    }
}

/// The proxies whose forwarding header is believed, and which header that is. Only one header
/// is read: a client can always add the other, and believing it would let it pick its identity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    /// Canonical: an IPv4-mapped entry (`::ffff:10.0.0.1`) is stored as IPv4, so that it matches
    /// the folded peer addresses it is compared with.
    nets: Vec<IpNet>,
    header: ForwardedHeader,
}

impl TrustedProxies {
    pub fn new(nets: impl IntoIterator<Item = IpNet>, header: ForwardedHeader) -> TrustedProxies {
        TrustedProxies {
            nets: nets.into_iter().map(canonical_net).collect(),
            header,
        }
    }

    /// Whether connections from `peer` come through a trusted proxy.
    pub fn contains(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        self.nets.iter().any(|net| net.contains(&peer))
    }

    /// The client a request from `peer` counts under. `None` when the peer is a trusted proxy
    /// that forwarded no address it does not trust itself: counting it under the proxy's own
    /// address would make every client behind the proxy one key, and let one of them lock the
    /// others out.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> Option<ClientKey> {
        self.client_address(peer, headers).map(ClientKey::of)
    }

    /// The address of the client [`TrustedProxies::client`] counts, whole (an IPv6 address is
    /// not cut to its /64): what an edge records as a request's sender.
    pub fn client_address(&self, peer: IpAddr, headers: &HeaderMap) -> Option<IpAddr> {
        if !self.contains(peer) {
            return Some(peer);
        }
        let hops = self.hops(headers);
        hops.iter().rev().find(|hop| !self.contains(**hop)).copied()
    }

    /// The addresses of the forwarding header, left to right; hops that are not addresses
    /// (`unknown`, RFC 7239's obfuscated `_names`) are left out.
    fn hops(&self, headers: &HeaderMap) -> Vec<IpAddr> {
        let values = headers
            .get_all(match self.header {
                ForwardedHeader::XForwardedFor => "x-forwarded-for",
                ForwardedHeader::Forwarded => "forwarded",
            })
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','));
        match self.header {
            ForwardedHeader::XForwardedFor => values.filter_map(parse_node).collect(),
            ForwardedHeader::Forwarded => values
                .filter_map(|element| {
                    element.split(';').find_map(|pair| {
                        let (name, value) = pair.trim().split_once('=')?;
                        name.trim().eq_ignore_ascii_case("for").then_some(value)
                    })
                })
                .filter_map(parse_node)
                .collect(),
        }
    }
}

/// `::ffff:a.b.c.d/n` (n ≥ 96) is the IPv4 network `a.b.c.d/(n-96)`.
fn canonical_net(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.addr().to_ipv4_mapped() {
            Some(v4) => IpNet::new(IpAddr::V4(v4), v6.prefix_len() - 96).unwrap_or(net),
            None => net,
        },
        other => other,
    }
}

/// One hop: an address, or an address with a port (`192.0.2.1:443`, `[2001:db8::1]:443`) as
/// several proxies and RFC 7239 write them, quoted or not; `None` for anything else.
fn parse_node(node: &str) -> Option<IpAddr> {
    let node = node.trim().trim_matches('"');
    node.parse::<IpAddr>()
        .or_else(|_| node.parse::<SocketAddr>().map(|addr| addr.ip()))
        .ok()
        .or_else(|| node.strip_prefix('[')?.strip_suffix(']')?.parse().ok())
        .map(|ip| ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with(name: &'static str, value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_static(value));
        h
    }

    fn proxies(list: &[&str], header: ForwardedHeader) -> TrustedProxies {
        TrustedProxies::new(list.iter().map(|s| s.parse().unwrap()), header)
    }

    fn key(ip: &str) -> Option<ClientKey> {
        Some(ClientKey::of(ip.parse().unwrap()))
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_key_is_written_as_its_address_is() {
        for text in [
            "0.0.0.0",
            "255.255.255.255",
            "10.0.100.9",
            "1.20.3.199",
            "192.168.1.10",
        ] {
            assert_eq!(key(text).unwrap().to_string(), text);
        }
        assert_eq!(
            key("2001:db8:1:2:3:4:5:6").unwrap().to_string(),
            "2001:db8:1:2::/64"
        );
        assert_eq!(key("::ffff:127.0.0.1").unwrap().to_string(), "127.0.0.1");
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let trusted = proxies(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let headers = with("x-forwarded-for", "1.2.3.4");
        assert_eq!(
            trusted.client(ip("203.0.113.9"), &headers),
            key("203.0.113.9")
        );
    }

    #[test]
    fn a_trusted_proxy_yields_the_right_most_untrusted_hop() {
        let trusted = proxies(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let headers = with("x-forwarded-for", "6.6.6.6, 1.2.3.4, 10.0.0.7");
        assert_eq!(trusted.client(ip("10.0.0.1"), &headers), key("1.2.3.4"));
    }

    #[test]
    fn a_trusted_proxy_that_forwards_nothing_usable_identifies_no_one() {
        let trusted = proxies(&["10.0.0.1/32"], ForwardedHeader::XForwardedFor);
        assert_eq!(trusted.client(ip("10.0.0.1"), &HeaderMap::new()), None);
        let only_proxies = with("x-forwarded-for", "unknown, 10.0.0.1");
        assert_eq!(trusted.client(ip("10.0.0.1"), &only_proxies), None);
    }

    #[test]
    fn ipv4_mapped_peers_and_entries_are_folded() {
        let trusted = proxies(&["::ffff:10.0.0.0/104"], ForwardedHeader::XForwardedFor);
        assert!(trusted.contains(ip("10.1.2.3")));
        assert!(trusted.contains(ip("::ffff:10.1.2.3")));
        assert!(!trusted.contains(ip("11.0.0.1")));
        assert_eq!(
            ClientKey::of(ip("::ffff:192.0.2.1")),
            ClientKey::of(ip("192.0.2.1"))
        );
    }

    #[test]
    fn hops_with_ports_are_read() {
        assert_eq!(parse_node(" 192.0.2.1:5555"), Some(ip("192.0.2.1")));
        assert_eq!(parse_node("[2001:db8::1]:443"), Some(ip("2001:db8::1")));
        assert_eq!(parse_node("\"[2001:db8::1]\""), Some(ip("2001:db8::1")));
        assert_eq!(parse_node("2001:db8::1"), Some(ip("2001:db8::1")));
        assert_eq!(parse_node("unknown"), None);
        assert_eq!(parse_node("_hidden"), None);
    }

    #[test]
    fn rfc_7239_forwarded_is_read_when_configured_and_only_then() {
        let headers = {
            let mut h = with(
                "forwarded",
                "for=192.0.2.60;proto=http;by=203.0.113.43, For=\"[2001:db8:cafe::17]:4711\"",
            );
            h.insert("x-forwarded-for", HeaderValue::from_static("6.6.6.6"));
            h
        };
        let forwarded = proxies(&["127.0.0.1/32"], ForwardedHeader::Forwarded);
        assert_eq!(
            forwarded.client(ip("127.0.0.1"), &headers),
            key("2001:db8:cafe::1")
        );
        let xff = proxies(&["127.0.0.1/32"], ForwardedHeader::XForwardedFor);
        assert_eq!(xff.client(ip("127.0.0.1"), &headers), key("6.6.6.6"));
    }

    #[test]
    fn ipv6_clients_are_keyed_by_their_64() {
        assert_eq!(
            ClientKey::of(ip("2001:db8:0:1::1")),
            ClientKey::of(ip("2001:db8:0:1:ffff::9"))
        );
        assert_ne!(
            ClientKey::of(ip("2001:db8:0:1::1")),
            ClientKey::of(ip("2001:db8:0:2::1"))
        );
        assert_eq!(
            ClientKey::of(ip("2001:db8:0:1::1")).to_string(),
            "2001:db8:0:1::/64"
        );
    }
}

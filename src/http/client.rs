//! Which client a request comes from, for the auth-failure lockout: the socket's address, or, when
//! that address is a trusted proxy, the right-most `X-Forwarded-For` hop that is not one.

use std::net::IpAddr;

use axum::http::HeaderMap;
use ipnet::IpNet;

/// The client address of a request that arrived from `peer`.
///
/// IPv4-mapped IPv6 addresses are folded to IPv4 so that one client has one identity. An untrusted
/// peer's `X-Forwarded-For` is ignored: anyone can write that header.
pub fn client_address(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let peer = peer.to_canonical();
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let hops: Vec<IpAddr> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(parse_hop)
        .map(|ip| ip.to_canonical())
        .collect();
    hops.iter()
        .rev()
        .find(|ip| !is_trusted(ip))
        .or(hops.first())
        .copied()
        .unwrap_or(peer)
}

/// One `X-Forwarded-For` hop: an address, or an address with a port (`192.0.2.1:443`,
/// `[2001:db8::1]:443`) as several proxies write them; `None` for anything else.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim().trim_matches('"');
    hop.parse::<IpAddr>()
        .or_else(|_| hop.parse::<std::net::SocketAddr>().map(|addr| addr.ip()))
        .ok()
        .or_else(|| hop.strip_prefix('[')?.strip_suffix(']')?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn xff(value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static(value));
        h
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn untrusted_peer_is_the_client_whatever_it_forwards() {
        let peer: IpAddr = "203.0.113.9".parse().unwrap();
        assert_eq!(
            client_address(peer, &xff("1.2.3.4"), &nets(&["10.0.0.0/8"])),
            peer
        );
    }

    #[test]
    fn trusted_proxy_yields_right_most_untrusted_hop() {
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        let got = client_address(
            peer,
            &xff("6.6.6.6, 1.2.3.4, 10.0.0.7"),
            &nets(&["10.0.0.0/8"]),
        );
        assert_eq!(got, "1.2.3.4".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn ipv4_mapped_ipv6_is_folded() {
        let peer: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(
            client_address(peer, &HeaderMap::new(), &[]),
            "192.0.2.1".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn trusted_proxy_without_header_is_the_client() {
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(
            client_address(peer, &HeaderMap::new(), &nets(&["10.0.0.1/32"])),
            peer
        );
    }

    #[test]
    fn hops_with_ports_are_read() {
        assert_eq!(parse_hop(" 192.0.2.1:5555"), "192.0.2.1".parse().ok());
        assert_eq!(parse_hop("[2001:db8::1]:443"), "2001:db8::1".parse().ok());
        assert_eq!(parse_hop("[2001:db8::1]"), "2001:db8::1".parse().ok());
        assert_eq!(parse_hop("2001:db8::1"), "2001:db8::1".parse().ok());
        assert_eq!(parse_hop("unknown"), None);
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        let got = client_address(
            peer,
            &xff("198.51.100.7:5555, 10.0.0.7"),
            &nets(&["10.0.0.0/8"]),
        );
        assert_eq!(got, "198.51.100.7".parse::<IpAddr>().unwrap());
    }
}

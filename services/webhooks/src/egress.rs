//! Where a delivery may go, so that an endpoint cannot turn the platform
//! into a proxy into its own network (request forgery). An endpoint's URL
//! is checked when it is saved, and every connection is checked again at
//! delivery: the HTTP client resolves names through [`GuardedResolver`],
//! which drops every forbidden address, so a name that later resolves
//! elsewhere (DNS rebinding) reaches nothing. Redirects are not followed,
//! proxies from the environment are ignored, and only the start of a
//! response is read.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Why an endpoint URL or a connection is refused; shown to the endpoint's
/// owner.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("not a URL: {0}")]
    Malformed(String),
    #[error("only https URLs are allowed")]
    NotHttps,
    #[error("the URL may not carry a user name or password")]
    Credentials,
    #[error("the URL has no host")]
    NoHost,
    #[error("{0} is a private, loopback, link-local or reserved address")]
    Forbidden(IpAddr),
    #[error("{host} resolves to {ip}, a private, loopback, link-local or reserved address")]
    ResolvesToForbidden { host: String, ip: IpAddr },
    #[error("{0} does not resolve")]
    Unresolvable(String),
}

/// What is allowed besides public addresses over https.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// The development switch: `http`, and loopback addresses.
    pub allow_local: bool,
}

impl Policy {
    /// Whether a connection to `ip` is allowed.
    pub fn allows(self, ip: IpAddr) -> bool {
        if self.allow_local && canonical(ip).is_loopback() {
            return true;
        }
        !forbidden(ip)
    }
}

/// IPv4 addresses carried in IPv6 ones (mapped `::ffff:a.b.c.d`, and the
/// NAT64 prefix `64:ff9b::/96`) are judged as the IPv4 address they reach.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return IpAddr::V4(v4);
            }
            let s = v6.segments();
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let [a, b] = s[6].to_be_bytes();
                let [c, d] = s[7].to_be_bytes();
                return IpAddr::V4(Ipv4Addr::new(a, b, c, d));
            }
            IpAddr::V6(v6)
        }
        v4 => v4,
    }
}

/// Addresses no webhook may reach: this host, private networks, link-local
/// (cloud metadata services live at 169.254.169.254 and fd00:ec2::254),
/// carrier-grade NAT, multicast, and every reserved or documentation range.
pub fn forbidden(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0 // "this network"
        || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240 // reserved
}

fn forbidden_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00 // unique local (fd00:ec2::254 included)
        || (first & 0xffc0) == 0xfe80 // link-local
        || (first & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (first == 0x2001 && ip.segments()[1] == 0x0db8) // documentation
        || ip.segments()[..6] == [0, 0, 0, 0, 0, 0] // IPv4-compatible, deprecated
}

/// Parses and checks an endpoint URL as it is saved: its form here, and
/// every address its host resolves to now.
pub async fn check_url(raw: &str, policy: Policy) -> Result<Url, Refusal> {
    let url = check_form(raw, policy)?;
    let host = url.host_str().ok_or(Refusal::NoHost)?.to_owned();
    if let Some(ip) = literal_ip(&url) {
        return if policy.allows(ip) {
            Ok(url)
        } else {
            Err(Refusal::Forbidden(ip))
        };
    }
    let port = url.port_or_known_default().unwrap_or(443);
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|_| Refusal::Unresolvable(host.clone()))?
        .collect();
    if addrs.is_empty() {
        return Err(Refusal::Unresolvable(host));
    }
    // Any forbidden address refuses the name: a name that resolves both
    // inside and outside is how a rebinding starts.
    if let Some(bad) = addrs.iter().find(|a| !policy.allows(a.ip())) {
        return Err(Refusal::ResolvesToForbidden { host, ip: bad.ip() });
    }
    Ok(url)
}

/// The checks that need no DNS: scheme, credentials, host.
pub fn check_form(raw: &str, policy: Policy) -> Result<Url, Refusal> {
    if raw.len() > 2000 {
        return Err(Refusal::Malformed("longer than 2000 characters".into()));
    }
    let url = Url::parse(raw.trim()).map_err(|e| Refusal::Malformed(e.to_string()))?;
    match url.scheme() {
        "https" => {}
        "http" if policy.allow_local => {}
        _ => return Err(Refusal::NotHttps),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Refusal::Credentials);
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(Refusal::NoHost);
    }
    // Parsing percent-encodes: the stored form must fit too.
    if url.as_str().len() > 2000 {
        return Err(Refusal::Malformed(
            "longer than 2000 characters once encoded".into(),
        ));
    }
    Ok(url)
}

/// The URL's host when it is an address rather than a name.
pub fn literal_ip(url: &Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(v4) => Some(IpAddr::V4(v4)),
        url::Host::Ipv6(v6) => Some(IpAddr::V6(v6)),
        url::Host::Domain(_) => None,
    }
}

/// The HTTP client's resolver: the system's answers, less every address the
/// policy forbids; a name left with none fails to connect.
#[derive(Debug, Clone, Copy)]
pub struct GuardedResolver {
    pub policy: Policy,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| policy.allows(a.ip()))
                .collect();
            if allowed.is_empty() {
                let refusal = match found.first() {
                    Some(a) => Refusal::ResolvesToForbidden { host, ip: a.ip() },
                    None => Refusal::Unresolvable(host),
                };
                return Err(Box::new(refusal) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// The delivery client: guarded resolution, no redirects, no proxies, a
/// whole-request timeout.
pub fn client(policy: Policy, timeout: std::time::Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .dns_resolver(Arc::new(GuardedResolver { policy }))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(timeout.min(std::time::Duration::from_secs(10)))
        .timeout(timeout)
        .user_agent("gpumarket-webhooks/1")
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRICT: Policy = Policy { allow_local: false };
    const LOCAL: Policy = Policy { allow_local: true };

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn private_and_special_addresses_are_forbidden() {
        for bad in [
            "127.0.0.1",
            "127.255.0.9",
            "0.0.0.0",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "198.18.0.1",
            "240.0.0.1",
            "192.0.2.1",
            "::1",
            "::",
            "fd00:ec2::254",
            "fc00::1",
            "fe80::1",
            "ff02::1",
            "::ffff:10.0.0.1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "::10.0.0.1",
            "2001:db8::1",
        ] {
            assert!(forbidden(ip(bad)), "{bad} should be forbidden");
            assert!(!STRICT.allows(ip(bad)), "{bad}");
        }
        for good in [
            "93.184.215.14",
            "8.8.8.8",
            "172.32.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(!forbidden(ip(good)), "{good} should be allowed");
        }
    }

    #[test]
    fn the_development_switch_allows_loopback_and_nothing_else() {
        for ok in ["127.0.0.1", "::1", "::ffff:127.0.0.1"] {
            assert!(LOCAL.allows(ip(ok)), "{ok}");
        }
        for bad in [
            "10.0.0.1",
            "169.254.169.254",
            "192.168.0.1",
            "fd00:ec2::254",
        ] {
            assert!(!LOCAL.allows(ip(bad)), "{bad}");
        }
    }

    #[test]
    fn the_url_form_is_checked() {
        assert_eq!(
            check_form("http://example.com/", STRICT),
            Err(Refusal::NotHttps)
        );
        assert_eq!(
            check_form("ftp://example.com/", LOCAL),
            Err(Refusal::NotHttps)
        );
        assert!(check_form("http://127.0.0.1:9/", LOCAL).is_ok());
        assert_eq!(
            check_form("https://user:pw@example.com/", STRICT),
            Err(Refusal::Credentials)
        );
        assert!(matches!(
            check_form("not a url", STRICT),
            Err(Refusal::Malformed(_))
        ));
        assert!(check_form("https://example.com/hook?x=1", STRICT).is_ok());
        // 700 characters that become 2,100 once percent-encoded.
        let long = format!("https://example.com/{}", "é".repeat(700));
        assert!(long.chars().count() < 2000);
        assert!(matches!(
            check_form(&long, STRICT),
            Err(Refusal::Malformed(_))
        ));
    }

    #[tokio::test]
    async fn addresses_and_names_that_reach_inside_are_refused_when_saved() {
        for raw in [
            "https://127.0.0.1/",
            "https://[::1]/",
            "https://169.254.169.254/latest/meta-data/",
            "https://[::ffff:10.0.0.1]/",
            "https://0x7f.1/",
        ] {
            assert!(check_url(raw, STRICT).await.is_err(), "{raw}");
        }
        // A name that resolves to loopback (the hosts file) is refused too.
        assert!(matches!(
            check_url("https://localhost/", STRICT).await,
            Err(Refusal::ResolvesToForbidden { .. })
        ));
        assert!(check_url("http://localhost:9/", LOCAL).await.is_ok());
        assert!(check_url("https://10.0.0.1/", LOCAL).await.is_err());
    }

    #[tokio::test]
    async fn the_resolver_drops_forbidden_answers() {
        let resolver = GuardedResolver { policy: STRICT };
        let name: Name = "localhost".parse().unwrap();
        assert!(resolver.resolve(name).await.is_err());
        let resolver = GuardedResolver { policy: LOCAL };
        let name: Name = "localhost".parse().unwrap();
        let addrs: Vec<SocketAddr> = resolver.resolve(name).await.unwrap().collect();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()) && !addrs.is_empty());
    }
}

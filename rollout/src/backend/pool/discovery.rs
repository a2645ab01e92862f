//! Which servers the pool has: `http://host:port` targets, each resolved by the system resolver
//! (`getaddrinfo`, so `/etc/hosts`, DNS and a Kubernetes headless Service all work) to one server
//! per address. Names are resolved again periodically, so servers that appear or vanish behind a
//! name join or leave the pool; a failed resolution keeps the last answer.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use env_core::EnvError;

/// One configured server address, before resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub host: String,
    pub port: u16,
}

impl Target {
    /// Parses `http://host:port` (an IPv6 host in brackets). Only plaintext gRPC is spoken.
    pub fn parse(url: &str) -> Result<Target, EnvError> {
        let bad =
            |why: &str| EnvError::InvalidKwargs(format!("bad env server address {url:?}: {why}"));
        let uri: tonic::codegen::http::Uri = url.parse().map_err(|e| bad(&format!("{e}")))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => {
                return Err(bad(&format!(
                    "scheme {other:?} is not supported (use http://)"
                )));
            }
            None => return Err(bad("expected http://host:port")),
        }
        if uri.path() != "/" && !uri.path().is_empty() {
            return Err(bad("a path is not allowed"));
        }
        let host = uri.host().ok_or_else(|| bad("no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().ok_or_else(|| bad("no port"))?;
        Ok(Target { host, port })
    }

    /// Every address the name has now.
    pub async fn resolve(&self) -> std::io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((self.host.as_str(), self.port))
            .await?
            .collect())
    }
}

/// Resolves every target; `Err` names the first one that failed. Addresses are deduplicated and
/// sorted, so an unchanged answer leaves the pool unchanged.
pub(crate) async fn resolve_all(targets: &[Target]) -> Result<Vec<SocketAddr>, String> {
    let mut all = BTreeSet::new();
    for t in targets {
        let addrs = t
            .resolve()
            .await
            .map_err(|e| format!("cannot resolve {}:{}: {e}", t.host, t.port))?;
        if addrs.is_empty() {
            return Err(format!("{}:{} has no address", t.host, t.port));
        }
        all.extend(addrs);
    }
    Ok(all.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_and_bad_ones_say_why() {
        assert_eq!(
            Target::parse("http://envs.default.svc:50051").unwrap(),
            Target {
                host: "envs.default.svc".into(),
                port: 50051
            }
        );
        assert_eq!(Target::parse("http://[::1]:7").unwrap().host, "::1");
        for (bad, why) in [
            ("https://h:1", "not supported"),
            ("h:1", "expected http://"),
            ("http://h", "no port"),
            ("http://h:1/x", "path"),
            ("http://", ""),
        ] {
            let err = Target::parse(bad).unwrap_err().to_string();
            assert!(
                err.contains(why) && err.contains("bad env server address"),
                "{bad}: {err}"
            );
        }
    }

    #[tokio::test]
    async fn literal_addresses_resolve_to_themselves() {
        let t = [
            Target::parse("http://127.0.0.1:9").unwrap(),
            Target::parse("http://[::1]:9").unwrap(),
        ];
        let addrs = resolve_all(&t).await.unwrap();
        assert_eq!(
            addrs,
            vec!["127.0.0.1:9".parse().unwrap(), "[::1]:9".parse().unwrap()]
        );
        let err = resolve_all(&[Target::parse("http://no-such-host.invalid:9").unwrap()])
            .await
            .unwrap_err();
        assert!(err.contains("no-such-host.invalid"), "{err}");
    }
}

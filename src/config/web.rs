//! TLS and basic auth, configured the way Prometheus exporters are: a `web.config` file in
//! the exporter-toolkit format (https://prometheus.io/docs/prometheus/latest/configuration/https/),
//! named by the config key `web.config_file`.
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: /etc/gpuwarden/tls.crt
//!   key_file: /etc/gpuwarden/tls.key
//!   client_auth_type: RequireAndVerifyClientCert   # default NoClientCert
//!   client_ca_file: /etc/gpuwarden/clients-ca.crt
//!   min_version: TLS12                             # TLS12 (default) or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$...                         # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\n')
//! ```
//!
//! Relative paths are relative to the web config file, as in exporter-toolkit. A key
//! exporter-toolkit knows that gpuwarden does not implement (cipher_suites, http2 settings)
//! is refused by name rather than ignored: a silently ignored security setting is worse than
//! none. Passwords are checked with bcrypt off the async threads, and a good user/password
//! pair is remembered as a keyed 64-bit fingerprint (SipHash with this process's random key,
//! never the password itself) so that a scrape every 15 s does not cost a bcrypt each time.

use crate::config::ConfigError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebConfig {
    #[serde(default)]
    tls_server_config: Option<RawTls>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert_file: PathBuf,
    key_file: PathBuf,
    #[serde(default)]
    client_auth_type: ClientAuth,
    #[serde(default)]
    client_ca_file: Option<PathBuf>,
    #[serde(default)]
    min_version: MinVersion,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
enum ClientAuth {
    #[default]
    NoClientCert,
    RequestClientCert,
    RequireAnyClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
enum MinVersion {
    #[default]
    TLS12,
    TLS13,
}

/// What the server enforces: a TLS config (None: plain HTTP) and basic auth users.
/// bcrypt costs a web config may use: 4 is bcrypt's minimum; above 12, each wrong password
/// costs the server too much (exporter-toolkit's own examples use 10).
pub(crate) const BCRYPT_COSTS: std::ops::RangeInclusive<u32> = 4..=12;

#[derive(Clone)]
pub struct WebSecurity {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    users: Arc<BTreeMap<String, String>>,
    /// Fingerprints of user/password/hash triples that passed bcrypt, so each is checked once.
    verified: Arc<Mutex<HashSet<u64>>>,
    fingerprint_key: std::collections::hash_map::RandomState,
}

impl std::fmt::Debug for WebSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSecurity")
            .field("tls", &self.tls.is_some())
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl WebSecurity {
    /// Plain HTTP, no auth: what gpuwarden does without `web.config_file`.
    pub fn none() -> WebSecurity {
        WebSecurity::new(None, BTreeMap::new())
    }

    /// With an empty password cache and a fresh fingerprint key.
    fn new(tls: Option<Arc<rustls::ServerConfig>>, users: BTreeMap<String, String>) -> WebSecurity {
        WebSecurity {
            tls,
            users: Arc::new(users),
            verified: Arc::new(Mutex::new(HashSet::new())),
            fingerprint_key: Default::default(),
        }
    }

    pub fn auth_required(&self) -> bool {
        !self.users.is_empty()
    }

    /// Reads and checks a web config file: its YAML (errors with line and column), the
    /// certificate and key, the client CA, the bcrypt hashes.
    pub fn load(file: &Path) -> Result<WebSecurity, ConfigError> {
        let error = |line, column, message: String| ConfigError {
            file: file.to_path_buf(),
            line,
            column,
            message,
            snippet: None,
        };
        let text =
            crate::config::read_config_file(file, "web config file").map_err(|e| error(None, None, e.to_string()))?;
        let raw: RawWebConfig = if text.trim().is_empty() {
            RawWebConfig::default()
        } else {
            let options = serde_saphyr::options! { strict_booleans: true };
            serde_saphyr::from_str_with_options(&text, options).map_err(|e| {
                let location = e.location();
                let (message, snippet) = crate::config::split_rendered(e.render().trim(), file);
                ConfigError {
                    snippet,
                    ..error(
                        location.as_ref().map(|l| l.line()),
                        location.as_ref().map(|l| l.column()),
                        format!(
                            "{message} (gpuwarden reads tls_server_config: cert_file, key_file, client_auth_type, client_ca_file, min_version; and basic_auth_users)"
                        ),
                    )
                }
            })?
        };
        // Errors found after parsing point at their key.
        let at = |section: &str, key: &str, message: String| {
            let position = crate::config::key_position(&text, section, key);
            error(position.map(|p| p.0), position.map(|p| p.1), message)
        };
        for (user, hash) in &raw.basic_auth_users {
            let Ok(parts) = hash.parse::<bcrypt::HashParts>() else {
                return Err(at(
                    "basic_auth_users",
                    user,
                    format!(
                        "basic_auth_users.{user} is not a bcrypt hash; make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`"
                    ),
                ));
            };
            if !BCRYPT_COSTS.contains(&parts.get_cost()) {
                return Err(at(
                    "basic_auth_users",
                    user,
                    format!(
                        "basic_auth_users.{user} has bcrypt cost {}; use {} to {}: every wrong password makes the \
                         server hash it at that cost (2^cost rounds), so a high cost lets anyone pin the CPU",
                        parts.get_cost(),
                        BCRYPT_COSTS.start(),
                        BCRYPT_COSTS.end()
                    ),
                ));
            }
        }
        let base = file.parent().unwrap_or(Path::new("."));
        let tls = match raw.tls_server_config {
            // Pointed at the key at fault.
            Some(tls) => Some(Arc::new(
                build_tls(&tls, base).map_err(|e| at("tls_server_config", e.key, e.to_string()))?,
            )),
            None => None,
        };
        Ok(WebSecurity::new(tls, raw.basic_auth_users))
    }

    /// Checks an Authorization header against the users. Blocking (bcrypt): call it off the
    /// async threads.
    pub fn check_basic_auth(&self, authorization: Option<&str>) -> bool {
        if self.users.is_empty() {
            return true;
        }
        let Some((user, password)) = authorization.and_then(decode_basic) else {
            return false;
        };
        let Some(hash) = self.users.get(&user) else {
            // The same work as for a known user, so a wrong name takes as long as a wrong password.
            if let Some(any) = self.users.values().next() {
                let _ = bcrypt::verify(&password, any);
            }
            return false;
        };
        let key = {
            use std::hash::BuildHasher;
            self.fingerprint_key.hash_one((&user, &password, hash))
        };
        if self
            .verified
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&key)
        {
            return true;
        }
        let ok = bcrypt::verify(&password, hash).unwrap_or(false);
        if ok {
            let mut verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
            // A handful of scrapers at most; a flood of distinct good passwords is not a thing.
            if verified.len() < 64 {
                verified.insert(key);
            }
        }
        ok
    }
}

/// `Basic dXNlcjpwYXNz` -> ("user", "pass").
fn decode_basic(header: &str) -> Option<(String, String)> {
    use base64::Engine;
    let (scheme, encoded) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// How long before its end a certificate's coming expiry is worth a warning.
const EXPIRY_WARNING: std::time::Duration = std::time::Duration::from_secs(14 * 24 * 3600);

/// A served certificate that has expired (or is about to, or is not valid yet) still loads:
/// the scraper decides what to accept. But it is worth one log line at start and on reload.
fn warn_about_validity(cert: &CertificateDer<'_>, file: &Path) {
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert.as_ref()) else {
        log::warn!(
            "tls_server_config.cert_file {}: cannot read its validity period",
            file.display()
        );
        return;
    };
    let validity = parsed.validity();
    let now = x509_parser::time::ASN1Time::now();
    let not_after = validity.not_after;
    if now > not_after {
        log::warn!(
            "tls_server_config.cert_file {}: the certificate expired on {not_after}; scrapers that check it will refuse the connection",
            file.display()
        );
    } else if now < validity.not_before {
        log::warn!(
            "tls_server_config.cert_file {}: the certificate is not valid before {}",
            file.display(),
            validity.not_before
        );
    } else if validity
        .time_to_expiration()
        .is_some_and(|left| left.unsigned_abs() < EXPIRY_WARNING)
    {
        log::warn!(
            "tls_server_config.cert_file {}: the certificate expires on {not_after}, within two weeks",
            file.display()
        );
    }
}

/// Why the TLS settings cannot be used: the key of `tls_server_config` at fault, and what.
#[derive(Debug, thiserror::Error)]
#[error("tls_server_config{}{}: {detail}", if .key.is_empty() { "" } else { "." }, .key)]
struct TlsError {
    /// `cert_file`, `key_file`, `client_ca_file`, `client_auth_type`, or "" for the section.
    key: &'static str,
    detail: String,
}

impl TlsError {
    fn at<'a>(key: &'static str, file: &'a Path) -> impl Fn(&dyn std::fmt::Display) -> TlsError + 'a {
        move |e| TlsError {
            key,
            detail: format!("{}: {e}", file.display()),
        }
    }
}

fn build_tls(tls: &RawTls, base: &Path) -> Result<rustls::ServerConfig, TlsError> {
    let path = |p: &Path| if p.is_absolute() { p.to_path_buf() } else { base.join(p) };
    let cert_file = path(&tls.cert_file);
    let key_file = path(&tls.key_file);
    let cert_error = TlsError::at("cert_file", &cert_file);
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_file)
        .map_err(|e| cert_error(&e))?
        .collect::<Result<_, _>>()
        .map_err(|e| cert_error(&e))?;
    if certs.is_empty() {
        return Err(cert_error(&"holds no certificate"));
    }
    warn_about_validity(&certs[0], &cert_file);
    let key = PrivateKeyDer::from_pem_file(&key_file).map_err(|e| TlsError::at("key_file", &key_file)(&e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = match tls.min_version {
        MinVersion::TLS12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        MinVersion::TLS13 => &[&rustls::version::TLS13],
    };
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| TlsError {
            key: "",
            detail: e.to_string(),
        })?;
    let verifier = match tls.client_auth_type {
        ClientAuth::NoClientCert => None,
        other => {
            let Some(ca) = &tls.client_ca_file else {
                return Err(TlsError {
                    key: "client_auth_type",
                    detail: format!("{other:?} needs client_ca_file (the CA that signs the clients' certificates)"),
                });
            };
            let ca = path(ca);
            let ca_error = TlsError::at("client_ca_file", &ca);
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(&ca).map_err(|e| ca_error(&e))? {
                let cert = cert.map_err(|e| ca_error(&e))?;
                roots.add(cert).map_err(|e| ca_error(&e))?;
            }
            let builder =
                rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            // RequestClientCert and RequireAnyClientCert do not verify in Go either; here any
            // certificate that is offered is verified, and these two accept a client without one.
            let builder = match other {
                ClientAuth::RequireAndVerifyClientCert => builder,
                _ => builder.allow_unauthenticated(),
            };
            Some(builder.build().map_err(|e| ca_error(&e))?)
        }
    };
    let builder = match verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| TlsError {
        key: "",
        detail: format!("the certificate and key do not go together: {e}"),
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_headers_decode() {
        assert_eq!(decode_basic("Basic dXNlcjpwYXNz"), Some(("user".into(), "pass".into())));
        assert_eq!(
            decode_basic("basic dXNlcjpwYTpzcw=="),
            Some(("user".into(), "pa:ss".into()))
        );
        assert_eq!(decode_basic("Bearer abc"), None);
        assert_eq!(decode_basic("Basic !!!"), None);
    }

    #[test]
    fn passwords_are_checked_with_bcrypt() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let security = WebSecurity::new(None, BTreeMap::from([("prometheus".to_string(), hash)]));
        use base64::Engine;
        let header = |u: &str, p: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
            )
        };
        assert!(security.check_basic_auth(Some(&header("prometheus", "s3cret"))));
        assert!(
            security.check_basic_auth(Some(&header("prometheus", "s3cret"))),
            "cached"
        );
        assert!(!security.check_basic_auth(Some(&header("prometheus", "wrong"))));
        assert!(!security.check_basic_auth(Some(&header("someone", "s3cret"))));
        assert!(!security.check_basic_auth(None));
        assert!(WebSecurity::none().check_basic_auth(None));
    }
}

#[cfg(test)]
mod load_tests {
    use super::*;

    fn load(text: &str) -> Result<WebSecurity, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("web.yml");
        std::fs::write(&file, text).unwrap();
        WebSecurity::load(&file)
    }

    #[test]
    fn bcrypt_costs_outside_the_range_are_refused_at_their_line() {
        // A cost-31 hash (its parts, not a computed one: computing it would take hours).
        let cost_31 = "$2b$31$abcdefghijklmnopqrstuuO5E2ghC4SJNn9xgVlXmYAjnUhNS8Wde";
        let text = format!(
            "# users\nbasic_auth_users:\n  ok: {}\n  slow: {cost_31}\n",
            bcrypt::hash("x", 4).unwrap()
        );
        let Err(e) = load(&text) else {
            panic!("cost 31 accepted")
        };
        assert_eq!((e.line, e.column), (Some(4), Some(3)), "{e}");
        assert!(e.message.contains("cost 31") && e.message.contains("4 to 12"), "{e}");
        assert!(load(&format!("basic_auth_users:\n  a: {}\n", bcrypt::hash("x", 12).unwrap())).is_ok());
    }

    #[test]
    fn certificate_errors_point_at_their_key() {
        let Err(e) = load("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n") else {
            panic!("a missing certificate accepted")
        };
        assert_eq!((e.line, e.column), (Some(2), Some(3)), "{e}");
        assert!(e.message.contains("cert_file"), "{e}");
    }
}

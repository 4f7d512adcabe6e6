//! TLS and basic auth from an exporter-toolkit web config, checked with a real TLS client
//! (curl) and certificates made by openssl: good and wrong passwords, no password, plain HTTP
//! to a TLS port, client certificates, a bad web config at start and on reload.

use crate::common;
use common::*;
use std::path::Path;
use std::process::Command;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl (Debian package openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA.
fn make_certificates(dir: &Path) {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    openssl(
        dir,
        &[
            &["req", "-x509"][..],
            &ec[..],
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=gpuwarden test CA",
            ],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for who in ["server", "client"] {
        let (key, csr, crt, ext) = (
            format!("{who}.key"),
            format!("{who}.csr"),
            format!("{who}.crt"),
            format!("{who}.ext"),
        );
        openssl(
            dir,
            &[
                &["req"][..],
                &ec[..],
                &["-keyout", &key, "-out", &csr, "-subj", &format!("/CN={who}")],
            ]
            .concat(),
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
        );
    }
}

struct Curl {
    code: Option<u16>,
    body: String,
    headers: String,
}

fn curl(dir: &Path, url: &str, extra: &[&str]) -> Curl {
    let out = Command::new("curl")
        .current_dir(dir)
        .args([
            "-s",
            "-D",
            "-",
            "-o",
            "body.txt",
            "-w",
            "%{http_code}",
            "--max-time",
            "5",
            "--cacert",
            "ca.crt",
        ])
        .args(extra)
        .arg(url)
        .output()
        .expect("curl (Debian package curl)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let code = text
        .get(text.len().saturating_sub(3)..)
        .and_then(|c| c.parse().ok())
        .filter(|c| *c != 0);
    Curl {
        code,
        body: std::fs::read_to_string(dir.join("body.txt")).unwrap_or_default(),
        headers: text,
    }
}

fn web_config(dir: &Path, client_auth: &str) -> String {
    let hash = bcrypt::hash("s3cret", 6).unwrap();
    let text = format!(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n{client_auth}basic_auth_users:\n  prometheus: {hash}\n"
    );
    std::fs::write(dir.join("web.yaml"), &text).unwrap();
    text
}

#[test]
fn tls_and_basic_auth_with_a_real_client() {
    let certs = tempfile::tempdir().unwrap();
    make_certificates(certs.path());
    web_config(certs.path(), "");
    let config = test_config(
        &sim_library(),
        &format!("web:\n  config_file: {}\n", certs.path().join("web.yaml").display()),
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    assert!(d.log_text().contains("serving metrics on https://"), "{}", d.log_text());
    let url = format!("https://{}/metrics", d.addr);

    let ok = curl(certs.path(), &url, &["-u", "prometheus:s3cret"]);
    assert_eq!(ok.code, Some(200), "{}", ok.headers);
    assert!(ok.body.contains("gpu_up{"), "{}", ok.body);
    // Again, now from the verified-password cache.
    assert_eq!(curl(certs.path(), &url, &["-u", "prometheus:s3cret"]).code, Some(200));

    let wrong = curl(certs.path(), &url, &["-u", "prometheus:wrong"]);
    assert_eq!(wrong.code, Some(401));
    assert!(
        wrong.headers.to_lowercase().contains("www-authenticate: basic"),
        "{}",
        wrong.headers
    );
    assert_eq!(curl(certs.path(), &url, &["-u", "nobody:s3cret"]).code, Some(401));
    assert_eq!(curl(certs.path(), &url, &[]).code, Some(401));
    // Every endpoint, not only /metrics.
    for path in ["/healthz", "/", "/api/v1/events"] {
        let url = format!("https://{}{path}", d.addr);
        assert_eq!(curl(certs.path(), &url, &[]).code, Some(401), "{path}");
        assert_eq!(
            curl(certs.path(), &url, &["-u", "prometheus:s3cret"]).code,
            Some(200),
            "{path}"
        );
    }
    // Plain HTTP to the TLS port gets no answer, and the server carries on.
    let plain = curl(
        certs.path(),
        &format!("http://{}/metrics", d.addr),
        &["-u", "prometheus:s3cret"],
    );
    assert!(plain.code.is_none() || plain.code == Some(400), "{:?}", plain.code);
    // A client that does not trust the certificate refuses it.
    let untrusted = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", &url])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&untrusted.stdout), "000");
    assert_eq!(curl(certs.path(), &url, &["-u", "prometheus:s3cret"]).code, Some(200));
    assert_eq!(d.stop(), Some(0));
}

#[test]
fn client_certificates_are_required_when_configured() {
    let certs = tempfile::tempdir().unwrap();
    make_certificates(certs.path());
    web_config(
        certs.path(),
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
    );
    let config = test_config(
        &sim_library(),
        &format!("web:\n  config_file: {}\n", certs.path().join("web.yaml").display()),
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    let url = format!("https://{}/metrics", d.addr);
    let without = curl(certs.path(), &url, &["-u", "prometheus:s3cret"]);
    assert_eq!(without.code, None, "no client certificate, no connection");
    let with = curl(
        certs.path(),
        &url,
        &["-u", "prometheus:s3cret", "--cert", "client.crt", "--key", "client.key"],
    );
    assert_eq!(with.code, Some(200), "{}", with.headers);
    // A client certificate does not replace the password.
    let no_password = curl(certs.path(), &url, &["--cert", "client.crt", "--key", "client.key"]);
    assert_eq!(no_password.code, Some(401));
}

#[test]
fn a_bad_web_config_is_refused_at_start_and_on_reload() {
    let certs = tempfile::tempdir().unwrap();
    make_certificates(certs.path());
    // At start: a misspelt key, with its line and column; exit 78.
    std::fs::write(
        certs.path().join("bad.yaml"),
        "tls_server_config:\n  cert_file: server.crt\n  keyfile: server.key\n",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("config.yaml");
    std::fs::write(
        &config_path,
        test_config(
            &sim_library(),
            &format!("web:\n  config_file: {}\n", certs.path().join("bad.yaml").display()),
        ),
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["run", "--config"])
        .arg(&config_path)
        .env("GPUWARDEN_SIM_NVML_SCENARIO", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{}:3:3", certs.path().join("bad.yaml").display())),
        "{stderr}"
    );
    assert!(stderr.contains("keyfile"), "{stderr}");

    // On reload: a hash that is not bcrypt; the running TLS and users stay.
    web_config(certs.path(), "");
    let config = test_config(
        &sim_library(),
        &format!("web:\n  config_file: {}\n", certs.path().join("web.yaml").display()),
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    std::fs::write(
        certs.path().join("web.yaml"),
        "basic_auth_users:\n  prometheus: plaintext\n",
    )
    .unwrap();
    d.signal(libc::SIGHUP);
    d.wait_for_log("reload refused", 1, std::time::Duration::from_secs(5));
    assert!(d.log_text().contains("is not a bcrypt hash"), "{}", d.log_text());
    let url = format!("https://{}/metrics", d.addr);
    assert_eq!(curl(certs.path(), &url, &["-u", "prometheus:s3cret"]).code, Some(200));
    assert_eq!(curl(certs.path(), &url, &[]).code, Some(401));
}

/// An expired certificate, or one about to expire, is served (the scraper decides) with a
/// warning in the log.
#[test]
fn an_expired_certificate_gets_a_warning() {
    for (days, says) in [("0", "expired on"), ("3", "within two weeks")] {
        let dir = tempfile::tempdir().unwrap();
        openssl(
            dir.path(),
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "k.pem",
                "-out",
                "r.csr",
                "-subj",
                "/CN=localhost",
            ],
        );
        // With an extension, so it is a version 3 certificate (rustls refuses version 1).
        std::fs::write(dir.path().join("ext.cnf"), "subjectAltName=DNS:localhost\n").unwrap();
        openssl(
            dir.path(),
            &[
                "x509", "-req", "-in", "r.csr", "-signkey", "k.pem", "-out", "c.pem", "-days", days, "-extfile",
                "ext.cnf",
            ],
        );
        // `-days 0` ends the certificate's validity now: a second later it has expired.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        std::fs::write(
            dir.path().join("web.yaml"),
            "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n",
        )
        .unwrap();
        let config = test_config(
            &sim_library(),
            &format!("web:\n  config_file: {}\n", dir.path().join("web.yaml").display()),
        );
        let d = Daemon::start_with(DEMO_SCENARIO, &config);
        let log = d.log_text();
        assert!(log.contains(says) && log.contains("c.pem"), "{days} days: {log}");
    }
}

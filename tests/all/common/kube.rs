//! A real Kubernetes control plane on loopback: etcd and kube-apiserver v1.37 as
//! scripts/kube/build.sh builds them (it runs here first; a second run is a no-op), with RBAC
//! and the Node authorizer on, TLS from a CA made here, an admin token for the test's own
//! writes (Nodes, ResourceSlices, RBAC) and service-account tokens for gpuwarden. No kubelet,
//! scheduler or controller manager: the test makes the objects a node would have. The API
//! server can be stopped and started again over the same etcd (an outage).

use super::free_port;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct ControlPlane {
    pub dir: tempfile::TempDir,
    /// kube-apiserver's arguments beyond the harness's own.
    extra: Vec<String>,
    etcd: Child,
    apiserver: Option<Child>,
    pub port: u16,
    etcd_port: u16,
    bin: PathBuf,
}

/// The control plane's binaries, built when they are not (minutes the first time).
pub fn kube_bin() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(root.join("scripts/kube/build.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/kube/build.sh");
    assert!(out.status.success(), "scripts/kube/build.sh failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("").trim())
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver, with `extra` kube-apiserver arguments
    /// (`--runtime-config=...`).
    pub fn start_with(extra: &[&str]) -> ControlPlane {
        let bin = kube_bin();
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let d = dir.path();
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        let mut ca = vec!["req", "-x509"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-subj",
            "/CN=gpuwarden-test-ca",
            "-days",
            "2",
        ]);
        ca.extend([
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(d, &ca);
        let mut csr = vec!["req"];
        csr.extend(ec);
        csr.extend([
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=kube-apiserver",
        ]);
        openssl(d, &csr);
        std::fs::write(
            d.join("ext.cnf"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
            ]
            .into_iter()
            .chain(["-out", "server.crt", "-days", "2", "-extfile", "ext.cnf"])
            .collect::<Vec<_>>(),
        );
        openssl(d, &["genrsa", "-out", "sa.key", "2048"]);
        std::fs::write(d.join("tokens.csv"), "admin-token,admin,admin-uid,\"system:masters\"\n").unwrap();
        let etcd_port = free_port();
        let peer_port = free_port();
        let etcd_log = std::fs::File::create(d.join("etcd.log")).unwrap();
        let etcd = Command::new(bin.join("etcd"))
            .args(["--data-dir", &d.join("etcd").display().to_string()])
            .args(["--listen-client-urls", &format!("http://127.0.0.1:{etcd_port}")])
            .args(["--advertise-client-urls", &format!("http://127.0.0.1:{etcd_port}")])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer_port}")])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer_port}"),
            ])
            .args(["--initial-cluster", &format!("default=http://127.0.0.1:{peer_port}")])
            .args(["--log-level", "warn"])
            .stdout(etcd_log.try_clone().unwrap())
            .stderr(etcd_log)
            .spawn()
            .expect("start etcd");
        let mut plane = ControlPlane {
            dir,
            extra: extra.iter().map(|a| a.to_string()).collect(),
            etcd,
            apiserver: None,
            port: free_port(),
            etcd_port,
            bin,
        };
        std::fs::write(
            plane.dir.path().join("kubeconfig"),
            format!(
                "apiVersion: v1\nkind: Config\nclusters: [{{name: t, cluster: {{server: \"{}\", certificate-authority: {}}}}}]\n\
                 users: [{{name: admin, user: {{token: admin-token}}}}]\ncontexts: [{{name: t, context: {{cluster: t, user: admin}}}}]\ncurrent-context: t\n",
                plane.server(),
                plane.ca().display()
            ),
        )
        .unwrap();
        let started = Instant::now();
        plane.start_apiserver();
        eprintln!("control plane ready in {:.1} s", started.elapsed().as_secs_f64());
        plane
    }

    pub fn server(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// Starts the API server (again) and waits until it is ready.
    pub fn start_apiserver(&mut self) {
        let d = self.dir.path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.join("apiserver.log"))
            .unwrap();
        let file = |name: &str| d.join(name).display().to_string();
        let child = Command::new(self.bin.join("kube-apiserver"))
            .args(["--etcd-servers", &format!("http://127.0.0.1:{}", self.etcd_port)])
            .args(["--bind-address", "127.0.0.1", "--secure-port", &self.port.to_string()])
            .args([
                "--tls-cert-file",
                &file("server.crt"),
                "--tls-private-key-file",
                &file("server.key"),
            ])
            .args([
                "--client-ca-file",
                &file("ca.crt"),
                "--token-auth-file",
                &file("tokens.csv"),
            ])
            .args(["--authorization-mode", "Node,RBAC"])
            .args(["--service-account-issuer", "https://kubernetes.default.svc"])
            .args([
                "--service-account-key-file",
                &file("sa.key"),
                "--service-account-signing-key-file",
                &file("sa.key"),
            ])
            .args([
                "--service-cluster-ip-range",
                "10.0.0.0/24",
                "--cert-dir",
                &file("certs"),
            ])
            .args(&self.extra)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start kube-apiserver");
        self.apiserver = Some(child);
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let (code, out, _) = self.kubectl(&["get", "--raw", "/readyz"], None);
            if code == 0 && out.trim() == "ok" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready in 90 s: {}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        // The default namespace's Events need it; the API server's own controller makes it.
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.kubectl(&["get", "namespace", "default"], None).0 != 0 {
            assert!(Instant::now() < deadline, "no default namespace: {}", self.log_tail());
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Stops the API server (etcd keeps the objects): an outage.
    pub fn stop_apiserver(&mut self) {
        if let Some(mut child) = self.apiserver.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("apiserver.log")).unwrap_or_default();
        log.lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// kubectl as the admin: (exit code, stdout, stderr).
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
        self.kubectl_as(
            &[
                "--kubeconfig",
                &self.dir.path().join("kubeconfig").display().to_string(),
            ],
            args,
            stdin,
        )
    }

    /// kubectl with a bearer token instead of the admin's (what gpuwarden may do).
    pub fn kubectl_with_token(&self, token: &str, args: &[&str]) -> (i32, String, String) {
        let server = self.server();
        let ca = self.ca().display().to_string();
        self.kubectl_as(
            &["--server", &server, "--certificate-authority", &ca, "--token", token],
            args,
            None,
        )
    }

    fn kubectl_as(&self, auth: &[&str], args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .args(auth)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl");
        if let Some(text) = stdin {
            child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `kubectl apply -f -` of `yaml`; panics when it fails.
    pub fn apply(&self, yaml: &str) {
        let (code, out, err) = self.kubectl(&["apply", "-f", "-"], Some(yaml));
        assert_eq!(code, 0, "kubectl apply: {out}{err}");
    }

    /// An object as JSON (`kubectl get KIND NAME -o json`); None where it is not there.
    pub fn get(&self, kind: &str, name: &str) -> Option<serde_json::Value> {
        let (code, out, _) = self.kubectl(&["get", kind, name, "-o", "json"], None);
        (code == 0).then(|| serde_json::from_str(&out).unwrap())
    }

    /// A raw GET as JSON.
    pub fn raw(&self, path: &str) -> serde_json::Value {
        let (code, out, err) = self.kubectl(&["get", "--raw", path], None);
        assert_eq!(code, 0, "GET {path}: {err}");
        serde_json::from_str(&out).unwrap()
    }

    /// A token of service account `namespace/name`, written to a file of its own (mode 0600).
    pub fn token_file(&self, namespace: &str, name: &str, extra: &[&str]) -> PathBuf {
        let mut args = vec!["create", "token", name, "-n", namespace, "--duration", "2h"];
        args.extend(extra);
        let (code, out, err) = self.kubectl(&args, None);
        assert_eq!(code, 0, "kubectl create token: {err}");
        let bound = extra.last().map_or("unbound", |object| *object);
        let path = self.dir.path().join(format!("token-{namespace}-{name}-{bound}"));
        std::fs::write(&path, out.trim()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    }

    /// Makes a Node as a kubelet would register it (no kubelet runs).
    pub fn add_node(&self, name: &str) {
        self.apply(&format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    nvidia.com/gpu.present: \"true\"\n"
        ));
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop_apiserver();
        let _ = self.etcd.kill();
        let _ = self.etcd.wait();
    }
}

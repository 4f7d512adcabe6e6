//! A fake kubelet: tests/fake_kubelet.py (Python grpcio) serving the pod-resources API on a
//! unix socket, answering what a JSON file says at each call.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn python() -> PathBuf {
    // scripts/ci/test.sh installs grpcio into this virtual environment.
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-venv/bin/python3");
    if venv.exists() { venv } else { PathBuf::from("python3") }
}

pub struct FakeKubelet {
    child: Child,
    pub socket: PathBuf,
    answer: PathBuf,
}

impl FakeKubelet {
    pub fn start(dir: &Path, answer: &str) -> FakeKubelet {
        let socket = dir.join("kubelet.sock");
        let answer_file = dir.join("answer.json");
        std::fs::write(&answer_file, answer).unwrap();
        let _ = std::fs::remove_file(&socket);
        let child = Command::new(python())
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_kubelet.py"))
            .arg(&socket)
            .arg(&answer_file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 with grpcio (scripts/ci/test.sh installs it into target/test-venv)");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(
                Instant::now() < deadline,
                "the fake kubelet did not start (is grpcio installed?)"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        FakeKubelet {
            child,
            socket,
            answer: answer_file,
        }
    }

    pub fn answer(&self, answer: &str) {
        std::fs::write(&self.answer, answer).unwrap();
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

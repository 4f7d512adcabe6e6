//! A webhook receiver on localhost for the event sink tests: one request per connection (as
//! gpuwarden's sink posts), answered the way its `Answer` says at that moment, every request
//! it read kept (headers and body).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// How the receiver answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// 200, empty.
    Take,
    /// 500 to a body that contains this text, 200 to the others.
    RefuseContaining(String),
    /// 503 to everything.
    Refuse,
    /// 302 to this URL.
    Redirect(String),
    /// 200 with this many bytes of body.
    Huge(usize),
    /// Reads the request and never answers.
    Silent,
    /// Closes the connection as soon as it comes, reading nothing: a receiver restarting.
    Hangup,
}

#[derive(Debug, Clone)]
pub struct Received {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

pub struct Receiver {
    pub port: u16,
    pub answer: Arc<Mutex<Answer>>,
    pub received: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    /// Listens on `port` (0: any free one).
    pub fn start(port: u16, answer: Answer) -> Receiver {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the receiver");
        let port = listener.local_addr().unwrap().port();
        let answer = Arc::new(Mutex::new(answer));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (a, r) = (answer.clone(), received.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (a, r) = (a.clone(), r.clone());
                std::thread::spawn(move || serve(stream, &a, &r));
            }
        });
        Receiver { port, answer, received }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/in", self.port)
    }

    pub fn set(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }

    pub fn events(&self) -> Vec<serde_json::Value> {
        self.received.lock().unwrap().iter().map(Received::json).collect()
    }

    pub fn all(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, answer: &Mutex<Answer>, received: &Mutex<Vec<Received>>) {
    if *answer.lock().unwrap() == Answer::Hangup {
        let _ = stream.shutdown(std::net::Shutdown::Both);
        return;
    }
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut headers = Vec::new();
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.trim_end().split_once(':') {
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let answer = answer.lock().unwrap().clone();
    let text = String::from_utf8_lossy(&body).into_owned();
    received.lock().unwrap().push(Received { headers, body });
    let mut stream = stream;
    let _ = match answer {
        Answer::Take => stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"),
        Answer::RefuseContaining(marker) if text.contains(&marker) => stream
            .write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 6\r\nconnection: close\r\n\r\npoison"),
        Answer::RefuseContaining(_) => {
            stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        }
        Answer::Refuse => {
            stream.write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        }
        Answer::Redirect(to) => stream.write_all(
            format!("HTTP/1.1 302 Found\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        ),
        Answer::Huge(bytes) => {
            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {bytes}\r\nconnection: close\r\n\r\n");
            let _ = stream.write_all(head.as_bytes());
            let chunk = vec![b'x'; 64 << 10];
            let mut sent = 0;
            while sent < bytes {
                let n = chunk.len().min(bytes - sent);
                if stream.write_all(&chunk[..n]).is_err() {
                    break;
                }
                sent += n;
            }
            Ok(())
        }
        Answer::Hangup => Ok(()),
        Answer::Silent => {
            // Meant: a receiver that takes the request and says nothing for half a minute.
            std::thread::sleep(std::time::Duration::from_secs(30));
            Ok(())
        }
    };
}

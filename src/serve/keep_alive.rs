//! Two limits on a kept-alive HTTP/1 connection, as Go's server has them and hyper does not:
//! a client gets [`HEADER_READ_TIMEOUT`] to send a request head (from the accept, and from
//! the first byte of each later request), and [`IDLE_TIMEOUT`] between requests.
//!
//! hyper's `header_read_timeout` runs from the moment hyper waits for the next head, idle
//! time included, so a connection kept alive between scrapes 15 s apart was closed after 5 s,
//! and a scraper that reuses its pooled connections without checking them (vmagent 1.79 as
//! Debian 12 ships it) spent about 2 s of every scrape finding that out: scrapes of a real
//! daemon read 2.0 s in the fleet simulation where Prometheus read 47 ms at most
//! (docs/fleet.md). The HTTP server turns hyper's timeout off and wraps each connection in a
//! [`HeadDeadline`] instead.
//!
//! What it costs: an idle connection holds one of the server's 4096 slots for up to 90 s rather
//! than 5 s, so a client that wants to hold slots needs a request every 90 s where it needed a
//! connection every 5 s. Either is easy for a determined client; the cap bounds the memory open
//! connections take, and the burst trimmer (http.rs) still gives it back when they close.

use super::slots::Tracker;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// How long a client may take to send its request headers, from the accept or from the
/// first byte of a request.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a connection may stay open between a response and the next request: above the
/// scrape intervals in use (Prometheus's default is 60 s), so a scraper keeps one connection.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Where a connection is between requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading a request head: [`HEADER_READ_TIMEOUT`] from its first byte (or the accept).
    Head,
    /// The head is in; the request is being answered (the router's own timeout applies).
    Answering,
    /// A response went out; waiting for the next request: [`IDLE_TIMEOUT`].
    Idle,
}

/// A connection's stream with the head and idle deadlines: a read that waits past the
/// deadline of its phase fails with `TimedOut`, which ends the connection.
pub(crate) struct HeadDeadline<S> {
    inner: S,
    phase: Phase,
    deadline: Pin<Box<Sleep>>,
    /// Line ends in a row at the end of what was read of the head ("\r" aside): two end it.
    line_ends: u8,
    /// The connection's slot (slots.rs): told when it waits and when it is answered, and
    /// asked to close while it waits when the server's slots run out.
    slot: Option<Arc<Tracker>>,
}

impl<S> HeadDeadline<S> {
    /// A just-accepted connection: its first head is due within [`HEADER_READ_TIMEOUT`].
    pub(crate) fn new(inner: S) -> Self {
        HeadDeadline {
            inner,
            phase: Phase::Head,
            deadline: Box::pin(tokio::time::sleep(HEADER_READ_TIMEOUT)),
            line_ends: 0,
            slot: None,
        }
    }

    /// The same, holding one of the server's slots that [`Registry`](super::slots::Registry)
    /// may ask back while the connection waits for a request.
    pub(crate) fn in_slot(inner: S, slot: Arc<Tracker>) -> Self {
        HeadDeadline {
            slot: Some(slot),
            ..HeadDeadline::new(inner)
        }
    }

    fn enter(&mut self, phase: Phase, allowed: Duration) {
        self.phase = phase;
        self.line_ends = 0;
        self.deadline.as_mut().reset(Instant::now() + allowed);
        if let (Phase::Idle, Some(slot)) = (phase, &self.slot) {
            slot.waiting();
        }
    }

    /// A response going out: the server only answers a head it has read, so what follows is
    /// the wait for the next request (each write of a long response starts it anew).
    fn after_write(&mut self, written: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = written
            && *n > 0
        {
            self.enter(Phase::Idle, IDLE_TIMEOUT);
        }
    }
}

/// Takes in bytes read while reading a head, `line_ends` carried from the last read; true once
/// they hold its end (an empty line: "\r\n\r\n", or a bare "\n\n" as httparse accepts).
fn head_ends_in(line_ends: &mut u8, bytes: &[u8]) -> bool {
    for &b in bytes {
        match b {
            b'\n' => {
                *line_ends += 1;
                if *line_ends == 2 {
                    return true;
                }
            }
            b'\r' => {}
            _ => *line_ends = 0,
        }
    }
    false
}

impl<S: AsyncRead + Unpin> AsyncRead for HeadDeadline<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = &buf.filled()[before..];
                if !read.is_empty() {
                    if this.phase == Phase::Idle {
                        this.enter(Phase::Head, HEADER_READ_TIMEOUT);
                    }
                    if this.phase == Phase::Head && head_ends_in(&mut this.line_ends, read) {
                        this.phase = Phase::Answering;
                        if let Some(slot) = &this.slot {
                            slot.answering();
                        }
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                if let Some(slot) = &this.slot {
                    // Asked to give its slot to a new connection while it waits: closed.
                    if this.phase != Phase::Answering && slot.evicted() {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::ConnectionAborted,
                            "closed to admit a new connection: every slot was taken",
                        )));
                    }
                    slot.park(cx.waker());
                }
                // Waiting for bytes: the deadline of the phase wakes this task if none come.
                if this.phase != Phase::Answering && this.deadline.as_mut().poll(cx).is_ready() {
                    let what = match this.phase {
                        Phase::Idle => "no request within the idle timeout",
                        _ => "request head not sent within the header timeout",
                    };
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, what)));
                }
                Poll::Pending
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for HeadDeadline<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, data);
        self.after_write(&written);
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.after_write(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    async fn read_some<S: AsyncRead + Unpin>(s: &mut HeadDeadline<S>) -> io::Result<usize> {
        let mut buf = [0u8; 256];
        s.read(&mut buf).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_fresh_connection_that_sends_no_head_times_out_after_the_header_timeout() {
        let (_client, server) = duplex(1024);
        let mut s = HeadDeadline::new(server);
        let started = Instant::now();
        let e = read_some(&mut s).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), HEADER_READ_TIMEOUT);
    }

    #[tokio::test(start_paused = true)]
    async fn half_a_head_is_cut_off_five_seconds_after_its_first_byte() {
        let (mut client, server) = duplex(1024);
        let mut s = HeadDeadline::new(server);
        client.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        assert!(read_some(&mut s).await.unwrap() > 0);
        let e = read_some(&mut s).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }

    /// The case that cost vmagent 2 s a scrape: 15 s between requests on one connection.
    #[tokio::test(start_paused = true)]
    async fn a_kept_alive_connection_waits_out_a_scrape_interval_then_the_idle_timeout() {
        let (mut client, server) = duplex(1024);
        let mut s = HeadDeadline::new(server);
        for _ in 0..3 {
            client
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            assert!(read_some(&mut s).await.unwrap() > 0);
            // Answering: no deadline while the handler works, however long.
            tokio::time::advance(Duration::from_secs(30)).await;
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            let mut reply = [0u8; 64];
            let _ = client.read(&mut reply).await.unwrap();
            tokio::time::advance(Duration::from_secs(15)).await;
        }
        // Past the idle timeout with no request: closed.
        let started = Instant::now();
        let e = read_some(&mut s).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), IDLE_TIMEOUT - Duration::from_secs(15));
    }

    #[test]
    fn a_head_ends_at_an_empty_line_across_reads_and_line_ends() {
        let mut line_ends = 0;
        assert!(!head_ends_in(&mut line_ends, b"GET / HTTP/1.1\r\nHost: x\r"));
        assert!(head_ends_in(&mut line_ends, b"\n\r\n"));
        let mut line_ends = 0;
        assert!(head_ends_in(&mut line_ends, b"GET / HTTP/1.1\nHost: x\n\n"));
        let mut line_ends = 0;
        assert!(!head_ends_in(&mut line_ends, b"GET / HTTP/1.1\r\nX: \n y\r\n"));
    }
}

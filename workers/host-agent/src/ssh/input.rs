//! The renter's input on its way to the container's processes, and how
//! much of it one connection may hold.
//!
//! russh reopens the SSH window as data arrives, whether or not it was
//! consumed, and one loop per connection both reads the renter's input and
//! writes the processes' output. Blocking that loop while a process is slow
//! to read deadlocks `ssh host cat < big` (cat waits for its output to be
//! sent, the loop for cat to read), and buffering without bound lets a
//! renter fill the agent's memory. So the brake is put on the connection's
//! socket instead ([`Throttled`]): past [`SOFT_LIMIT`] of unread input the
//! gateway reads from the renter only every [`TRICKLE`] (enough to see the
//! renter's window adjustments, so output keeps flowing) until the
//! processes catch up. Past [`HARD_LIMIT`] the loop itself waits for room,
//! and a connection that stays that full for [`STALL_LIMIT`] (a process that
//! never reads, fed without end) is closed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

/// Input held for one connection's processes before packets are slowed.
pub const SOFT_LIMIT: usize = 4 << 20;
/// Input held for one connection, at most.
pub const HARD_LIMIT: usize = 64 << 20;
/// Past [`SOFT_LIMIT`], one read from the renter's socket this often.
pub const TRICKLE: Duration = Duration::from_millis(5);
/// How long a connection may stay past [`HARD_LIMIT`].
pub const STALL_LIMIT: Duration = Duration::from_secs(60);

/// The input one connection holds.
pub struct Backlog {
    bytes: AtomicUsize,
    drained: Notify,
    soft_limit: usize,
    hard_limit: usize,
    stall_limit: Duration,
}

impl Default for Backlog {
    fn default() -> Self {
        Self::with_limits(SOFT_LIMIT, HARD_LIMIT, STALL_LIMIT)
    }
}

/// The input stalled: its processes do not read it.
#[derive(Debug)]
pub struct Stalled;

impl Backlog {
    fn with_limits(soft_limit: usize, hard_limit: usize, stall_limit: Duration) -> Self {
        Self {
            bytes: AtomicUsize::new(0),
            drained: Notify::new(),
            soft_limit,
            hard_limit,
            stall_limit,
        }
    }

    fn slowed(&self) -> bool {
        self.bytes() > self.soft_limit
    }

    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::SeqCst)
    }

    /// Waits while the connection holds [`HARD_LIMIT`] or more; Err after
    /// [`STALL_LIMIT`] of that.
    pub async fn admit(&self) -> Result<(), Stalled> {
        let started = tokio::time::Instant::now();
        while self.bytes() > self.hard_limit {
            if started.elapsed() >= self.stall_limit {
                return Err(Stalled);
            }
            // Woken as the processes read; the timeout re-checks in case
            // the wake-up came between the check and the wait.
            let _ = tokio::time::timeout(Duration::from_millis(5), self.drained.notified()).await;
        }
        Ok(())
    }

    /// Counts `data` in until the returned chunk is written (or dropped).
    pub fn hold(self: &Arc<Self>, data: &[u8]) -> Chunk {
        self.bytes.fetch_add(data.len(), Ordering::SeqCst);
        Chunk {
            data: data.to_vec(),
            backlog: self.clone(),
        }
    }
}

/// A piece of renter input, counted in its connection's [`Backlog`] while
/// it exists.
pub struct Chunk {
    data: Vec<u8>,
    backlog: Arc<Backlog>,
}

impl Chunk {
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        self.backlog
            .bytes
            .fetch_sub(self.data.len(), Ordering::SeqCst);
        self.backlog.drained.notify_waiters();
    }
}

/// The connection's socket, read slowly while its [`Backlog`] is past
/// [`SOFT_LIMIT`].
pub struct Throttled<S> {
    inner: S,
    backlog: Arc<Backlog>,
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> Throttled<S> {
    pub fn new(inner: S, backlog: Arc<Backlog>) -> Self {
        Self {
            inner,
            backlog,
            pause: None,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Throttled<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.backlog.slowed() {
            let pause = this
                .pause
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(TRICKLE)));
            if pause.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        this.pause = None;
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Throttled<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[tokio::test]
    async fn past_the_hard_limit_input_waits_and_then_stalls() {
        let ms = Duration::from_millis;
        let backlog = Arc::new(Backlog::with_limits(10, 100, ms(300)));
        let small = backlog.hold(&[0; 50]);
        assert!(backlog.slowed());
        let started = tokio::time::Instant::now();
        backlog.admit().await.unwrap();
        assert!(started.elapsed() < ms(100));

        let big = backlog.hold(&[0; 100]);
        let started = tokio::time::Instant::now();
        assert!(backlog.admit().await.is_err());
        assert!(started.elapsed() >= ms(300));

        // Room as soon as the processes read, without waiting out the limit.
        let waiter = {
            let backlog = backlog.clone();
            tokio::spawn(async move {
                let started = tokio::time::Instant::now();
                backlog.admit().await.unwrap();
                started.elapsed()
            })
        };
        tokio::time::sleep(ms(30)).await;
        drop(big);
        drop(small);
        assert!(waiter.await.unwrap() < ms(200));
        assert_eq!(backlog.bytes(), 0);
        assert!(!backlog.slowed());
    }

    #[tokio::test]
    async fn a_full_backlog_slows_reading_the_socket() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let backlog = Arc::new(Backlog::with_limits(10, 100, Duration::from_secs(1)));
        let (client, server) = tokio::io::duplex(1024);
        let mut server = Throttled::new(server, backlog.clone());
        let mut client = client;
        client.write_all(&[1; 64]).await.unwrap();
        let mut buf = [0u8; 1];
        let started = tokio::time::Instant::now();
        for _ in 0..20 {
            server.read_exact(&mut buf).await.unwrap();
        }
        assert!(started.elapsed() < TRICKLE * 5);
        let held = backlog.hold(&[0; 11]);
        let started = tokio::time::Instant::now();
        for _ in 0..20 {
            server.read_exact(&mut buf).await.unwrap();
        }
        assert!(started.elapsed() >= TRICKLE * 20);
        drop(held);
    }
}

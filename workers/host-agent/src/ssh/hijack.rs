//! Starting a TTY exec over the engine's unix socket ourselves, to get its
//! raw byte stream.
//!
//! With a TTY the engine sends the terminal's bytes unframed, and bollard's
//! decoder takes any read that starts with a byte 0, 1 or 2 for a
//! multiplexing header: it swallows 8 bytes and then waits for a "frame"
//! whose length is made of the terminal's next bytes (a `printf '\001'` in a
//! shell stalls the screen). Without a TTY the stream is framed and bollard
//! reads it right, so only TTY sessions come here, and only when the
//! gateway is told the socket ([`super::SshConfig::engine_socket`]).

use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Longest response head accepted from the engine.
const MAX_HEAD: usize = 16 * 1024;

/// The started exec's terminal: the stream and the bytes of it that were
/// read together with the response head.
pub struct Attached {
    pub stream: UnixStream,
    pub early: Vec<u8>,
}

/// `POST /exec/{id}/start` with `Upgrade: tcp`, as the Docker CLI does,
/// with the terminal's first size (`rows`, `cols`; 0 when unknown).
pub async fn start_tty(
    socket: &Path,
    exec_id: &str,
    rows: u16,
    cols: u16,
) -> std::io::Result<Attached> {
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    if !exec_id.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(invalid(format!("unexpected exec id {exec_id:?}")));
    }
    // The size is set as the terminal is made, before the process starts
    // (a resize after the start comes too late for a program's first look):
    // Docker reads `ConsoleSize` (API 1.42 on), Podman `h` and `w`.
    let body = if rows > 0 && cols > 0 {
        format!(
            r#"{{"Detach":false,"Tty":true,"ConsoleSize":[{rows},{cols}],"h":{rows},"w":{cols}}}"#
        )
    } else {
        r#"{"Detach":false,"Tty":true}"#.to_string()
    };
    let request = format!(
        "POST /exec/{exec_id}/start HTTP/1.1\r\n\
         Host: engine\r\n\
         Content-Type: application/json\r\n\
         Content-Length: {}\r\n\
         Connection: Upgrade\r\n\
         Upgrade: tcp\r\n\
         \r\n\
         {body}",
        body.len()
    );
    let mut stream = UnixStream::connect(socket).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 4096];
    let end = loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(invalid("the engine closed the connection".into()));
        }
        head.extend_from_slice(buf.get(..n).unwrap_or_default());
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        if head.len() > MAX_HEAD {
            return Err(invalid("the engine's response head is too long".into()));
        }
    };
    let early = head.split_off(end);
    let status_line = String::from_utf8_lossy(&head)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    let status = status_line.split_whitespace().nth(1).unwrap_or_default();
    // 101 after the upgrade; engines that only hijack answer 200.
    if status != "101" && status != "200" {
        let detail = String::from_utf8_lossy(&early)
            .trim()
            .chars()
            .take(300)
            .collect::<String>();
        return Err(invalid(format!(
            "the engine answered {status_line}: {detail}"
        )));
    }
    Ok(Attached { stream, early })
}

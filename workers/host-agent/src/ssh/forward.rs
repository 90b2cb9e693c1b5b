//! `direct-tcpip` channels (`ssh -L`): a renter reaches a port of their own
//! container, and nothing else. The target must name the container itself
//! (`localhost`, `127.0.0.1`, `::1` or its name `gpm-<instance>`); the
//! gateway connects to the container's address on its network, so the
//! agent's host and other instances stay out of reach.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use russh::server::Msg;
use russh::{Channel, ChannelMsg, ChannelOpenFailure};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::input::Backlog;
use crate::names;

/// Whether `host` names the instance's own container.
pub fn is_own_container(instance: Uuid, host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host == "127.0.0.1"
        || host == "::1"
        || host.eq_ignore_ascii_case(&names::container(instance))
}

/// The container's address for `port`: on the instance's own network when
/// it has one, else on the first network with an address.
pub async fn container_address(
    docker: &Docker,
    instance: Uuid,
    port: u16,
) -> Result<SocketAddr, String> {
    let inspect = docker
        .inspect_container(&names::container(instance), None)
        .await
        .map_err(|e| e.to_string())?;
    let mut networks: Vec<_> = inspect
        .network_settings
        .and_then(|s| s.networks)
        .unwrap_or_default()
        .into_iter()
        .collect();
    let own = names::network(instance);
    // The instance's network first, then by name so the choice is stable.
    networks.sort_by_key(|(name, _)| (*name != own, name.clone()));
    networks
        .into_iter()
        .flat_map(|(_, endpoint)| [endpoint.ip_address, endpoint.global_ipv6_address])
        .flatten()
        .find_map(|ip| ip.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, port))
        .ok_or_else(|| "the container has no network address".to_string())
}

/// Resolves and connects a `direct-tcpip` request of `instance`.
pub async fn connect(
    docker: &Docker,
    instance: Uuid,
    host: &str,
    port: u32,
    timeout: Duration,
) -> Result<TcpStream, ChannelOpenFailure> {
    if !is_own_container(instance, host) {
        return Err(ChannelOpenFailure::AdministrativelyProhibited);
    }
    let port = u16::try_from(port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or(ChannelOpenFailure::ConnectFailed)?;
    let address = tokio::time::timeout(timeout, container_address(docker, instance, port))
        .await
        .map_err(|_| ChannelOpenFailure::ConnectFailed)?
        .map_err(|error| {
            tracing::debug!(%instance, %error, "no address to forward to");
            ChannelOpenFailure::ConnectFailed
        })?;
    let stream = tokio::time::timeout(timeout, TcpStream::connect(address))
        .await
        .map_err(|_| ChannelOpenFailure::ConnectFailed)?
        .map_err(|error| {
            tracing::debug!(%instance, port, %error, "forwarded connection refused");
            ChannelOpenFailure::ConnectFailed
        })?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Copies both ways until both sides are done, then closes the channel.
/// The renter's data is taken off the channel at once and queued in the
/// connection's [`Backlog`]: waiting on a slow target inside russh would
/// stop the whole connection, the replies included (see [`super::input`]).
pub async fn relay(channel: Channel<Msg>, stream: TcpStream, backlog: Arc<Backlog>) {
    let (mut channel_read, channel_write) = channel.split();
    let (mut tcp_read, mut tcp_write) = stream.into_split();
    let (queue, mut queued) = mpsc::unbounded_channel();
    let take = async move {
        while let Some(message) = channel_read.wait().await {
            let sent = match message {
                ChannelMsg::Data { data } => queue.send(backlog.hold(&data)).is_ok(),
                ChannelMsg::Eof | ChannelMsg::Close => false,
                _ => true,
            };
            if !sent {
                break;
            }
        }
    };
    let up = async move {
        while let Some(chunk) = queued.recv().await {
            if tcp_write.write_all(chunk.bytes()).await.is_err() {
                break;
            }
        }
        let _ = tcp_write.shutdown().await;
    };
    let down = async {
        let mut writer = channel_write.make_writer();
        let _ = tokio::io::copy(&mut tcp_read, &mut writer).await;
        let _ = channel_write.eof().await;
    };
    tokio::join!(take, up, down);
    let _ = channel_write.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_container_itself_is_a_target() {
        let instance = Uuid::now_v7();
        for host in [
            "localhost",
            "LOCALHOST",
            "127.0.0.1",
            "::1",
            "[::1]",
            &names::container(instance),
        ] {
            assert!(is_own_container(instance, host), "{host}");
        }
        for host in [
            "10.88.0.1",
            "127.0.0.2",
            "example.com",
            "",
            &names::container(Uuid::now_v7()),
            "0.0.0.0",
        ] {
            assert!(!is_own_container(instance, host), "{host}");
        }
    }
}

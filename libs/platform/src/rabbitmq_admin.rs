//! A small client of the RabbitMQ management HTTP API: the calls the catalog
//! needs to give each host agent its own user and permissions, and to
//! take them away again (users, queues, permissions, topic permissions,
//! connections). Plain `reqwest`; every call is idempotent on the broker side
//! (PUT creates or replaces; DELETE of something missing is not an error).

use std::time::Duration;

use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::PlatformError;

#[derive(Clone)]
pub struct RabbitAdmin {
    base: Url,
    user: String,
    password: String,
    http: reqwest::Client,
}

/// An open AMQP connection as the management API lists it.
#[derive(Debug, Clone, Deserialize)]
pub struct ConnectionInfo {
    pub name: String,
    #[serde(default)]
    pub user: String,
    #[serde(default)]
    pub vhost: String,
}

/// One user's permissions in a vhost as the management API lists them.
#[derive(Debug, Clone, Deserialize)]
pub struct PermissionInfo {
    pub user: String,
    #[serde(default)]
    pub configure: String,
    #[serde(default)]
    pub write: String,
    #[serde(default)]
    pub read: String,
}

/// A node's memory and file handles as the management API reports them:
/// counts, of bytes and of handles.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct NodeStats {
    #[serde(default)]
    pub mem_used: u64,
    /// The memory high watermark.
    #[serde(default)]
    pub mem_limit: u64,
    #[serde(default)]
    pub fd_used: u64,
    /// The node's file handle limit.
    #[serde(default)]
    pub fd_total: u64,
}

/// A queue's depth as the management API lists it.
#[derive(Debug, Clone, Deserialize)]
pub struct QueueInfo {
    pub name: String,
    #[serde(default)]
    pub messages_ready: i64,
    #[serde(default)]
    pub messages_unacknowledged: i64,
    #[serde(default)]
    pub consumers: i64,
}

impl RabbitAdmin {
    /// `url` is `http://user:pass@host:port` (the management listener).
    pub fn new(url: &str) -> Result<Self, PlatformError> {
        let mut base = Url::parse(url).map_err(|e| {
            PlatformError::Config(format!("GPUMARKET_RABBITMQ_MANAGEMENT_URL: {e}"))
        })?;
        let user = crate::config::percent_decode(base.username()).unwrap_or_default();
        let password = base
            .password()
            .and_then(crate::config::percent_decode)
            .unwrap_or_default();
        let _ = base.set_username("");
        let _ = base.set_password(None);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?;
        Ok(Self {
            base,
            user,
            password,
            http,
        })
    }

    /// `api/<segments...>`, each segment percent-encoded (a vhost `/` is one
    /// segment, `%2F`).
    fn url(&self, segments: &[&str]) -> Result<Url, PlatformError> {
        let mut url = self.base.clone();
        {
            let mut path = url
                .path_segments_mut()
                .map_err(|()| PlatformError::Config("management URL cannot be a base".into()))?;
            path.pop_if_empty().push("api");
            for segment in segments {
                path.push(segment);
            }
        }
        Ok(url)
    }

    async fn call(
        &self,
        method: Method,
        url: Url,
        body: Option<Value>,
    ) -> Result<reqwest::Response, PlatformError> {
        let mut request = self
            .http
            .request(method.clone(), url.clone())
            .basic_auth(&self.user, Some(&self.password));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status();
        if status.is_success() || (method == Method::DELETE && status == StatusCode::NOT_FOUND) {
            return Ok(response);
        }
        let text = response.text().await.unwrap_or_default();
        Err(PlatformError::Other(format!(
            "rabbitmq management {method} {}: {status} {text}",
            url.path()
        )))
    }

    /// Creates the user or replaces its password and tags.
    pub async fn put_user(
        &self,
        name: &str,
        password: &str,
        tags: &[&str],
    ) -> Result<(), PlatformError> {
        let url = self.url(&["users", name])?;
        self.call(
            Method::PUT,
            url,
            Some(json!({ "password": password, "tags": tags.join(",") })),
        )
        .await?;
        Ok(())
    }

    /// Deletes the user (and with it its permissions); a missing user is fine.
    /// Open connections stay open: see [`RabbitAdmin::close_user_connections`].
    pub async fn delete_user(&self, name: &str) -> Result<(), PlatformError> {
        let url = self.url(&["users", name])?;
        self.call(Method::DELETE, url, None).await?;
        Ok(())
    }

    /// Creates `vhost` (if missing) and gives the management user every
    /// permission on it.
    pub async fn put_vhost(&self, vhost: &str) -> Result<(), PlatformError> {
        self.call(Method::PUT, self.url(&["vhosts", vhost])?, Some(json!({})))
            .await?;
        let user = self.user.clone();
        self.set_permissions(vhost, &user, ".*", ".*", ".*").await
    }

    /// Deletes `vhost` with its queues; a missing vhost is fine. A vhost of
    /// tens of thousands of queues can outlast the request while the broker
    /// goes on deleting: see [`RabbitAdmin::vhost_exists`].
    pub async fn delete_vhost(&self, vhost: &str) -> Result<(), PlatformError> {
        self.call(Method::DELETE, self.url(&["vhosts", vhost])?, None)
            .await?;
        Ok(())
    }

    pub async fn vhost_exists(&self, vhost: &str) -> Result<bool, PlatformError> {
        let response = self
            .http
            .get(self.url(&["vhosts", vhost])?)
            .basic_auth(&self.user, Some(&self.password))
            .send()
            .await?;
        Ok(response.status() != StatusCode::NOT_FOUND)
    }

    /// The first node's memory and file handles (`/api/nodes`).
    pub async fn node_stats(&self) -> Result<NodeStats, PlatformError> {
        let nodes: Vec<NodeStats> = self
            .call(Method::GET, self.url(&["nodes"])?, None)
            .await?
            .json()
            .await?;
        nodes
            .into_iter()
            .next()
            .ok_or_else(|| PlatformError::Other("rabbitmq management lists no node".into()))
    }

    pub async fn delete_queue(&self, vhost: &str, name: &str) -> Result<(), PlatformError> {
        let url = self.url(&["queues", vhost, name])?;
        self.call(Method::DELETE, url, None).await?;
        Ok(())
    }

    /// Sets the user's configure/write/read regexes in `vhost`.
    pub async fn set_permissions(
        &self,
        vhost: &str,
        user: &str,
        configure: &str,
        write: &str,
        read: &str,
    ) -> Result<(), PlatformError> {
        let url = self.url(&["permissions", vhost, user])?;
        self.call(
            Method::PUT,
            url,
            Some(json!({ "configure": configure, "write": write, "read": read })),
        )
        .await?;
        Ok(())
    }

    /// Sets the routing keys the user may publish (`write`) and bind (`read`)
    /// on the topic exchange `exchange` in `vhost`.
    pub async fn set_topic_permissions(
        &self,
        vhost: &str,
        user: &str,
        exchange: &str,
        write: &str,
        read: &str,
    ) -> Result<(), PlatformError> {
        let url = self.url(&["topic-permissions", vhost, user])?;
        self.call(
            Method::PUT,
            url,
            Some(json!({ "exchange": exchange, "write": write, "read": read })),
        )
        .await?;
        Ok(())
    }

    /// Every open connection the broker lists.
    pub async fn connections(&self) -> Result<Vec<ConnectionInfo>, PlatformError> {
        let mut url = self.url(&["connections"])?;
        url.query_pairs_mut()
            .append_pair("columns", "name,user,vhost");
        let response = self.call(Method::GET, url, None).await?;
        Ok(response.json().await?)
    }

    /// The queues of `vhost` with their depth (only the columns we read: a
    /// full listing carries per-queue stats we would parse for nothing).
    pub async fn queues(&self, vhost: &str) -> Result<Vec<QueueInfo>, PlatformError> {
        let mut url = self.url(&["queues", vhost])?;
        url.query_pairs_mut().append_pair(
            "columns",
            "name,messages_ready,messages_unacknowledged,consumers",
        );
        let response = self.call(Method::GET, url, None).await?;
        Ok(response.json().await?)
    }

    /// The names of the queues of `vhost` matching the regex `pattern`, read
    /// a page at a time (the broker filters; with 100,000 agents' queues a
    /// plain listing would be one very large answer).
    pub async fn queue_names_matching(
        &self,
        vhost: &str,
        pattern: &str,
    ) -> Result<Vec<String>, PlatformError> {
        #[derive(Deserialize)]
        struct Name {
            name: String,
        }
        #[derive(Deserialize)]
        struct Page {
            items: Vec<Name>,
            #[serde(default)]
            page_count: u64,
        }
        let mut names = Vec::new();
        let mut page = 1u64;
        loop {
            let mut url = self.url(&["queues", vhost])?;
            url.query_pairs_mut()
                .append_pair("page", &page.to_string())
                .append_pair("page_size", "500")
                .append_pair("name", pattern)
                .append_pair("use_regex", "true")
                .append_pair("columns", "name");
            let answer: Page = self.call(Method::GET, url, None).await?.json().await?;
            names.extend(answer.items.into_iter().map(|q| q.name));
            if page >= answer.page_count {
                return Ok(names);
            }
            page += 1;
        }
    }

    /// Every user's permissions in `vhost`.
    pub async fn permissions_in(&self, vhost: &str) -> Result<Vec<PermissionInfo>, PlatformError> {
        let url = self.url(&["vhosts", vhost, "permissions"])?;
        let response = self.call(Method::GET, url, None).await?;
        Ok(response.json().await?)
    }

    /// Open connections authenticated as `user`.
    pub async fn user_connections(&self, user: &str) -> Result<Vec<ConnectionInfo>, PlatformError> {
        Ok(self
            .connections()
            .await?
            .into_iter()
            .filter(|c| c.user == user)
            .collect())
    }

    /// Closes one connection; the client gets `CONNECTION_FORCED` with `reason`.
    pub async fn close_connection(&self, name: &str, reason: &str) -> Result<(), PlatformError> {
        let url = self.url(&["connections", name])?;
        let response = self
            .http
            .delete(url.clone())
            .basic_auth(&self.user, Some(&self.password))
            .header("X-Reason", reason)
            .send()
            .await?;
        let status = response.status();
        if status.is_success() || status == StatusCode::NOT_FOUND {
            return Ok(());
        }
        Err(PlatformError::Other(format!(
            "rabbitmq management DELETE {}: {status}",
            url.path()
        )))
    }

    /// The connections the broker tracks for `user` (`GET
    /// /api/connections/username/<user>`): read from connection tracking,
    /// which knows a connection as soon as it is open, unlike the general
    /// listing, whose statistics lag by seconds.
    pub async fn tracked_connections(
        &self,
        user: &str,
    ) -> Result<Vec<ConnectionInfo>, PlatformError> {
        let url = self.url(&["connections", "username", user])?;
        let response = self.retrying(Method::GET, url, None).await?;
        Ok(response.json().await?)
    }

    /// Closes every connection the broker tracks for `user` (`DELETE
    /// /api/connections/username/<user>`), however young.
    pub async fn close_tracked_connections(
        &self,
        user: &str,
        reason: &str,
    ) -> Result<(), PlatformError> {
        let url = self.url(&["connections", "username", user])?;
        self.retrying(Method::DELETE, url, Some(reason)).await?;
        Ok(())
    }

    /// One call, retried a few times on 5xx and transport errors (the
    /// management API answers 500 while a node is busy closing); a DELETE of
    /// something missing is fine.
    async fn retrying(
        &self,
        method: Method,
        url: Url,
        reason: Option<&str>,
    ) -> Result<reqwest::Response, PlatformError> {
        let mut last = String::new();
        for attempt in 0..5u64 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
            }
            let mut request = self
                .http
                .request(method.clone(), url.clone())
                .basic_auth(&self.user, Some(&self.password));
            if let Some(reason) = reason {
                request = request.header("X-Reason", reason);
            }
            match request.send().await {
                Ok(response) => {
                    let status = response.status();
                    if status.is_success()
                        || (method == Method::DELETE && status == StatusCode::NOT_FOUND)
                    {
                        return Ok(response);
                    }
                    last = format!("{status} {}", response.text().await.unwrap_or_default());
                    if !status.is_server_error() {
                        break;
                    }
                }
                Err(error) => last = error.to_string(),
            }
        }
        Err(PlatformError::Other(format!(
            "rabbitmq management {method} {}: {last}",
            url.path()
        )))
    }

    /// Closes every connection of `user` by the broker's connection tracking
    /// and returns once it tracks none; then looks once more a moment later,
    /// for a connection that was between authentication and being tracked.
    /// Meant for a user that can no longer log in (deleted), so nothing new
    /// can appear after that.
    pub async fn close_all_connections_of(
        &self,
        user: &str,
        reason: &str,
    ) -> Result<(), PlatformError> {
        for sweep in 0..2 {
            if sweep > 0 {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            let mut rounds = 0u64;
            loop {
                self.close_tracked_connections(user, reason).await?;
                if self.tracked_connections(user).await?.is_empty() {
                    break;
                }
                rounds += 1;
                if rounds >= 40 {
                    return Err(PlatformError::Other(format!(
                        "connections of {user} still open after closing them"
                    )));
                }
                tokio::time::sleep(Duration::from_millis(50 * rounds.min(4))).await;
            }
        }
        Ok(())
    }

    /// Every user whose name starts with `prefix` (test clean-up, and the
    /// generations of one machine's agent).
    pub async fn users_starting_with(&self, prefix: &str) -> Result<Vec<String>, PlatformError> {
        #[derive(Deserialize)]
        struct User {
            name: String,
        }
        let mut url = self.url(&["users"])?;
        url.query_pairs_mut().append_pair("columns", "name");
        let users: Vec<User> = self.retrying(Method::GET, url, None).await?.json().await?;
        Ok(users
            .into_iter()
            .map(|u| u.name)
            .filter(|n| n.starts_with(prefix))
            .collect())
    }

    /// Closes every open connection of `user` and returns once the broker
    /// lists none (a closed connection can stay listed, and refuse to be
    /// closed again, for a moment); returns how many it closed.
    pub async fn close_user_connections(
        &self,
        user: &str,
        reason: &str,
    ) -> Result<usize, PlatformError> {
        let mut closed = std::collections::HashSet::new();
        let mut last_error = None;
        for round in 0..20u64 {
            let open = self.user_connections(user).await?;
            if open.is_empty() {
                return Ok(closed.len());
            }
            for connection in &open {
                match self.close_connection(&connection.name, reason).await {
                    Ok(()) => {
                        closed.insert(connection.name.clone());
                    }
                    Err(error) => last_error = Some(error),
                }
            }
            tokio::time::sleep(Duration::from_millis(50 * (round + 1).min(4))).await;
        }
        Err(PlatformError::Other(format!(
            "connections of {user} still open after closing them: {}",
            last_error.map_or_else(|| "no error reported".to_owned(), |e| e.to_string())
        )))
    }
}

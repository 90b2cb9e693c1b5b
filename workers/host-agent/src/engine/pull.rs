//! `pull_image`: fetches the renter's image, bounded in size and time, from
//! an allowed registry, reporting progress. An image already present is not
//! pulled again but is still size-checked.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::CreateImageInfo;
use bollard::query_parameters::{CreateImageOptionsBuilder, RemoveImageOptionsBuilder};
use futures_util::StreamExt;

use super::{EngineError, is_not_found};
use crate::Progress;

/// A reference split into what the engine's pull needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// Lower-cased registry host (with port); `docker.io` for Docker Hub.
    pub registry: String,
    /// `registry/name` or `name` as written, without tag or digest.
    pub repository: String,
    /// The tag, or `@sha256:...` digest; `latest` when neither is given
    /// (an empty tag would make the engine pull every tag).
    pub tag: String,
}

impl ImageRef {
    pub fn parse(reference: &str) -> Result<ImageRef, EngineError> {
        let reference = reference.trim();
        let bad = || EngineError::BadImage(reference.to_owned());
        if reference.is_empty()
            || reference.len() > 512
            || reference
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(bad());
        }
        let (name, tag) = if let Some((name, digest)) = reference.split_once('@') {
            (name, format!("@{digest}"))
        } else {
            match reference.rsplit_once(':') {
                // A colon after the last slash separates the tag; one before
                // it is a registry port.
                Some((name, tag)) if !tag.contains('/') => (name, tag.to_owned()),
                _ => (reference, "latest".to_owned()),
            }
        };
        if name.is_empty() || tag.is_empty() {
            return Err(bad());
        }
        let first = name.split('/').next().unwrap_or_default();
        let registry = if name.contains('/')
            && (first.contains('.') || first.contains(':') || first == "localhost")
        {
            first.to_ascii_lowercase()
        } else {
            "docker.io".to_owned()
        };
        Ok(ImageRef {
            registry,
            repository: name.to_owned(),
            tag,
        })
    }

    /// `name:tag` or `name@digest`, as the engine names the image.
    pub fn full(&self) -> String {
        if self.tag.starts_with('@') {
            format!("{}{}", self.repository, self.tag)
        } else {
            format!("{}:{}", self.repository, self.tag)
        }
    }
}

/// Limits of one pull.
pub struct PullLimits<'a> {
    pub max_bytes: u64,
    pub timeout: Duration,
    /// Lower-cased hosts; empty = any.
    pub allowed_registries: &'a [String],
}

/// Pulls `reference` unless present, then checks its size.
pub async fn pull_image(
    docker: &Docker,
    reference: &str,
    limits: &PullLimits<'_>,
    progress: &Progress,
) -> Result<(), EngineError> {
    let image = ImageRef::parse(reference)?;
    if !limits.allowed_registries.is_empty() && !limits.allowed_registries.contains(&image.registry)
    {
        return Err(EngineError::RegistryNotAllowed(image.registry));
    }
    let full = image.full();
    let present = match docker.inspect_image(&full).await {
        Ok(_) => true,
        Err(e) if is_not_found(&e) => false,
        Err(e) => return Err(e.into()),
    };
    if !present {
        match tokio::time::timeout(
            limits.timeout,
            stream_pull(docker, &image, limits, progress),
        )
        .await
        {
            Ok(result) => result?,
            Err(_) => return Err(EngineError::PullTimedOut(limits.timeout)),
        }
    }
    let size = docker
        .inspect_image(&full)
        .await
        .map_err(|e| {
            if is_not_found(&e) {
                EngineError::ImageNotFound(full.clone())
            } else {
                e.into()
            }
        })?
        .size
        .unwrap_or(0);
    let size = u64::try_from(size).unwrap_or(0);
    if size > limits.max_bytes {
        // Not kept: it would only take the disk of images that fit. An
        // image in use by another container stays (the engine refuses).
        let options = RemoveImageOptionsBuilder::default().build();
        if let Err(error) = docker.remove_image(&full, Some(options), None).await {
            tracing::info!(image = %full, %error, "an image too large was not removed");
        }
        return Err(EngineError::ImageTooLarge {
            size,
            max: limits.max_bytes,
        });
    }
    tracing::info!(image = %full, size, pulled = !present, "image ready");
    Ok(())
}

async fn stream_pull(
    docker: &Docker,
    image: &ImageRef,
    limits: &PullLimits<'_>,
    progress: &Progress,
) -> Result<(), EngineError> {
    let builder = CreateImageOptionsBuilder::default().from_image(&image.repository);
    let options = if let Some(digest) = image.tag.strip_prefix('@') {
        // The engine takes a digest in the `tag` parameter too.
        builder.tag(digest)
    } else {
        builder.tag(&image.tag)
    }
    .build();
    let mut stream = docker.create_image(Some(options), None, None);
    let mut tally = PullTally::default();
    let mut reported = Instant::now();
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| pull_error(&image.full(), e))?;
        if let Some(detail) = info.error_detail {
            let message = detail.message.unwrap_or_default();
            return Err(pull_message_error(&image.full(), &message));
        }
        tally.update(&info);
        if tally.announced() > limits.max_bytes {
            return Err(EngineError::ImageTooLarge {
                size: tally.announced(),
                max: limits.max_bytes,
            });
        }
        if reported.elapsed() >= Duration::from_secs(1)
            && let Some(message) = tally.message()
        {
            progress.report(message);
            reported = Instant::now();
        }
    }
    Ok(())
}

/// What a pull's stream told so far: per layer, bytes downloaded and bytes
/// announced.
#[derive(Debug, Default)]
pub struct PullTally {
    layers: HashMap<String, (u64, u64)>,
}

impl PullTally {
    pub fn update(&mut self, info: &CreateImageInfo) {
        let Some(id) = info.id.clone() else {
            return;
        };
        let status = info.status.as_deref().unwrap_or_default();
        let entry = self.layers.entry(id).or_default();
        if let Some(detail) = &info.progress_detail {
            if let Some(total) = detail.total.and_then(|t| u64::try_from(t).ok())
                && total > 0
            {
                entry.1 = total;
            }
            if let Some(current) = detail.current.and_then(|c| u64::try_from(c).ok())
                && status == "Downloading"
            {
                entry.0 = current;
            }
        }
        if matches!(
            status,
            "Download complete" | "Pull complete" | "Already exists"
        ) {
            entry.0 = entry.1;
        }
    }

    /// Bytes the registry announced for the layers seen so far.
    pub fn announced(&self) -> u64 {
        self.layers.values().map(|l| l.1).sum()
    }

    /// `pulled X MB of Y MB`, once sizes are known.
    pub fn message(&self) -> Option<String> {
        let announced = self.announced();
        if announced == 0 {
            return None;
        }
        let done: u64 = self.layers.values().map(|l| l.0.min(l.1)).sum();
        Some(format!(
            "pulled {} MB of {} MB",
            done / 1_000_000,
            announced / 1_000_000
        ))
    }
}

fn pull_error(image: &str, error: bollard::errors::Error) -> EngineError {
    match &error {
        bollard::errors::Error::DockerResponseServerError {
            status_code,
            message,
        } => match status_code {
            404 => EngineError::ImageNotFound(image.to_owned()),
            401 | 403 => EngineError::Unauthorized(image.to_owned()),
            _ => pull_message_error(image, message),
        },
        bollard::errors::Error::DockerStreamError { error } => pull_message_error(image, error),
        _ => error.into(),
    }
}

/// Sorts an engine's pull message into a reason a renter can act on.
fn pull_message_error(image: &str, message: &str) -> EngineError {
    let lower = message.to_ascii_lowercase();
    if lower.contains("unauthorized")
        || lower.contains("authentication required")
        || lower.contains("denied")
    {
        EngineError::Unauthorized(image.to_owned())
    } else if lower.contains("not found")
        || lower.contains("manifest unknown")
        || lower.contains("name unknown")
        || lower.contains("no such")
    {
        EngineError::ImageNotFound(image.to_owned())
    } else {
        // The registry's words help the renter; bounded.
        EngineError::PullFailed {
            image: image.to_owned(),
            message: message.chars().take(160).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::ProgressDetail;

    fn info(id: &str, status: &str, current: i64, total: i64) -> CreateImageInfo {
        CreateImageInfo {
            id: Some(id.into()),
            status: Some(status.into()),
            progress_detail: Some(ProgressDetail {
                current: Some(current),
                total: Some(total),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn progress_sums_the_layers_announced() {
        let mut tally = PullTally::default();
        assert_eq!(tally.message(), None);
        tally.update(&info("a", "Downloading", 10_000_000, 40_000_000));
        tally.update(&info("b", "Downloading", 0, 60_000_000));
        assert_eq!(tally.announced(), 100_000_000);
        assert_eq!(tally.message().unwrap(), "pulled 10 MB of 100 MB");
        tally.update(&CreateImageInfo {
            id: Some("a".into()),
            status: Some("Download complete".into()),
            ..Default::default()
        });
        assert_eq!(tally.message().unwrap(), "pulled 40 MB of 100 MB");
    }

    #[test]
    fn references_name_their_registry_and_tag() {
        let r = ImageRef::parse("127.0.0.1:5000/team/app").unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.full(), "127.0.0.1:5000/team/app:latest");
        let r = ImageRef::parse("pytorch/pytorch:2.3").unwrap();
        assert_eq!(r.registry, "docker.io");
        assert_eq!(r.tag, "2.3");
        let r = ImageRef::parse("ghcr.io/a/b@sha256:abc").unwrap();
        assert_eq!(r.registry, "ghcr.io");
        assert_eq!(r.full(), "ghcr.io/a/b@sha256:abc");
        assert_eq!(ImageRef::parse("ubuntu").unwrap().full(), "ubuntu:latest");
        assert_eq!(
            ImageRef::parse("localhost/x:1").unwrap().registry,
            "localhost"
        );
        assert!(ImageRef::parse("a b").is_err());
    }
}

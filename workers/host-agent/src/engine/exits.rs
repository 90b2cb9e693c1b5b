//! Containers that stopped on their own: the reason a renter reads (exit
//! code or OOM kill, with the last lines of output) for a failed readiness
//! check, and the [`InstanceExited`] reports of instances that are "wanted
//! running" but whose container is not.

use bollard::Docker;
use bollard::models::{ContainerInspectResponse, ContainerStateStatusEnum};
use bollard::query_parameters::LogsOptionsBuilder;
use chrono::{DateTime, Utc};
use contracts::ids::InstanceId;
use futures_util::StreamExt;
use uuid::Uuid;

use super::labels;
use super::state::StateDir;
use crate::names;
use crate::protocol::InstanceExited;

/// Characters of a container's output quoted in a reason, at most.
pub const MAX_LOG_CHARS: usize = 300;
/// Lines of output asked of the engine.
const LOG_LINES: &str = "20";

/// The last lines of the container's output, at most [`MAX_LOG_CHARS`]
/// characters (the end kept), control characters but newlines dropped.
pub async fn last_logs(docker: &Docker, container: &str) -> String {
    let options = LogsOptionsBuilder::default()
        .stdout(true)
        .stderr(true)
        .tail(LOG_LINES)
        .build();
    let mut stream = docker.logs(container, Some(options));
    let mut text = String::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) => text.push_str(&String::from_utf8_lossy(&chunk.into_bytes())),
            Err(error) => {
                tracing::debug!(%container, %error, "reading a container's logs failed");
                break;
            }
        }
        if text.len() > 64 * 1024 {
            break;
        }
    }
    bound_tail(&text, MAX_LOG_CHARS)
}

/// The last `max` characters of `text`, trimmed, without control
/// characters other than newlines.
pub fn bound_tail(text: &str, max: usize) -> String {
    let clean: Vec<char> = text
        .trim()
        .chars()
        .filter(|c| *c == '\n' || !c.is_control())
        .collect();
    let start = clean.len().saturating_sub(max);
    clean[start..].iter().collect::<String>().trim().to_owned()
}

/// `the container exited with code N: <output>` or `the container was
/// killed: out of memory: <output>`.
pub fn reason(exit_code: i64, oom_killed: bool, logs: &str) -> String {
    let head = if oom_killed {
        "the container was killed: out of memory".to_owned()
    } else {
        format!("the container exited with code {exit_code}")
    };
    if logs.is_empty() {
        head
    } else {
        format!("{head}: {logs}")
    }
}

/// Exit code, OOM kill and finish time of a stopped container; None while
/// it runs or was never started.
pub fn stopped_state(container: &ContainerInspectResponse) -> Option<(i64, bool, DateTime<Utc>)> {
    let state = container.state.as_ref()?;
    match state.status {
        Some(ContainerStateStatusEnum::EXITED) | Some(ContainerStateStatusEnum::DEAD) => {}
        _ => return None,
    }
    if state.running == Some(true) {
        return None;
    }
    let finished_at = state
        .finished_at
        .as_deref()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        // The engine's zero time: never finished as far as it knows.
        .filter(|t| t.timestamp() > 0)
        .unwrap_or_else(Utc::now);
    Some((
        state.exit_code.unwrap_or(-1),
        state.oom_killed.unwrap_or(false),
        finished_at,
    ))
}

/// Instances of `machine` wanted running whose container stopped.
pub async fn exited(docker: &Docker, state: &StateDir, machine: Uuid) -> Vec<InstanceExited> {
    let wanted = match state.wanted() {
        Ok(wanted) if !wanted.is_empty() => wanted,
        Ok(_) => return Vec::new(),
        Err(error) => {
            tracing::warn!(%error, "reading the wanted-running markers failed");
            return Vec::new();
        }
    };
    let mut exits = Vec::new();
    for instance in labels::managed_instances(docker, machine, true, "exits").await {
        let Some(run) = wanted.get(&instance).copied() else {
            continue;
        };
        let name = names::container(instance);
        let Ok(container) = docker.inspect_container(&name, None).await else {
            continue;
        };
        let Some((exit_code, oom_killed, finished_at)) = stopped_state(&container) else {
            continue;
        };
        let logs = last_logs(docker, &name).await;
        exits.push(InstanceExited {
            instance_id: InstanceId(instance),
            run,
            exit_code,
            oom_killed,
            finished_at,
            reason: reason(exit_code, oom_killed, &logs),
        });
    }
    exits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_quote_the_end_of_the_output() {
        let long = format!("{}\nlast line\u{1b}[0m", "x".repeat(1000));
        let tail = bound_tail(&long, MAX_LOG_CHARS);
        assert!(tail.chars().count() <= MAX_LOG_CHARS);
        assert!(tail.ends_with("last line[0m"));
        assert_eq!(
            reason(3, false, "boom"),
            "the container exited with code 3: boom"
        );
        assert_eq!(
            reason(137, true, ""),
            "the container was killed: out of memory"
        );
    }
}

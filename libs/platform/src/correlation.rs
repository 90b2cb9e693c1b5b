//! The correlation id that follows one request or message through every
//! service: the header it travels in between services, and the task-local
//! that holds it while a request or message is handled (logs, outbox
//! envelopes and internal calls read it from there).

/// The header an internal call carries the correlation id in.
pub const CORRELATION_HEADER: &str = "x-correlation-id";

tokio::task_local! {
    static CORRELATION_ID: String;
}

/// The correlation id of the request or message being handled, if any.
pub fn current_correlation_id() -> Option<String> {
    CORRELATION_ID.try_with(Clone::clone).ok()
}

/// Runs `fut` with `cid` as the current correlation id.
pub async fn with_correlation_id<F: std::future::Future>(cid: String, fut: F) -> F::Output {
    CORRELATION_ID.scope(cid, fut).await
}

/// Runs the synchronous `f` with `cid` (if any) as the current correlation
/// id: for code on the blocking pool, where the task-local is not set.
pub fn in_correlation_scope<R>(cid: Option<String>, f: impl FnOnce() -> R) -> R {
    match cid {
        Some(cid) => CORRELATION_ID.sync_scope(cid, f),
        None => f(),
    }
}

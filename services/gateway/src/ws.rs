//! The WebSocket transport (graphql-transport-ws) runs the schema through
//! [`CodedExecutor`], so every error a subscription answers with carries an
//! `extensions.code`, as over HTTP.

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;

use crate::graphql::GatewaySchema;

/// The schema as the WebSocket transport runs it: every error in a
/// subscription's responses carries an `extensions.code`, as over HTTP.
#[derive(Clone)]
pub struct CodedExecutor(pub GatewaySchema);

impl async_graphql::Executor for CodedExecutor {
    fn execute(
        &self,
        request: async_graphql::Request,
    ) -> impl std::future::Future<Output = async_graphql::Response> + Send {
        let schema = self.0.clone();
        async move {
            let mut response = schema.execute(request).await;
            crate::error::ensure_codes(&mut response);
            response
        }
    }

    fn execute_stream(
        &self,
        request: async_graphql::Request,
        session_data: Option<Arc<async_graphql::Data>>,
    ) -> BoxStream<'static, async_graphql::Response> {
        // The same guards as over HTTP run first (`extensions::guards`):
        // validation would walk a fragment bomb.
        async_graphql::Executor::execute_stream(&self.0, request, session_data)
            .map(|mut response| {
                crate::error::ensure_codes(&mut response);
                response
            })
            .boxed()
    }
}

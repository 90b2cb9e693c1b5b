//! Every internal HTTP call as a value (issue 19): its method, its path
//! (with `{placeholders}`), the types of its path parameters, of its body
//! (or query string, for a GET) and of its reply. The caller
//! (`platform::internal::InternalClient::call`) and the route
//! (`platform::endpoint::route`) name the same constant, so a renamed path,
//! a changed body or a changed reply is one edit here and the compiler finds
//! both ends. Modelled on crates.io's `BackgroundJob` (the type knows its
//! name) and svix's tagged `QueueTask`.
//!
//! One module per service that serves the endpoints.

use std::marker::PhantomData;

pub mod billing;
pub mod catalog;
pub mod metering;
pub mod ordering;
pub mod quota;
pub mod webhooks;

/// Every service's liveness probe (outside `/internal`, no token needed).
pub const HEALTHZ: Endpoint<(), (), Health> = Endpoint::get("/healthz");

/// The answer of a probe: `ok` (live) or `ready`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Health {
    pub status: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
}

impl Method {
    pub const fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
        }
    }
}

/// One internal endpoint. `P` is what fills the path's placeholders, in
/// order: `()`, one typed id, or a tuple of them. `B` is the JSON body of a
/// POST or PUT, or the query string of a GET (`()` for none). `R` is the
/// reply's JSON.
pub struct Endpoint<P, B, R> {
    pub method: Method,
    pub path: &'static str,
    types: PhantomData<fn(P, B) -> R>,
}

// By hand: derived impls would ask the same of P, B and R.
impl<P, B, R> Clone for Endpoint<P, B, R> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P, B, R> Copy for Endpoint<P, B, R> {}

impl<P: PathParams, B, R> Endpoint<P, B, R> {
    /// A path whose placeholders do not match `P` does not compile: the
    /// constants are evaluated by the compiler.
    const fn new(method: Method, path: &'static str) -> Self {
        assert!(
            placeholders(path) == P::COUNT,
            "the path's placeholders and the endpoint's path parameters differ"
        );
        Self {
            method,
            path,
            types: PhantomData,
        }
    }

    pub const fn get(path: &'static str) -> Self {
        Self::new(Method::Get, path)
    }

    pub const fn post(path: &'static str) -> Self {
        Self::new(Method::Post, path)
    }

    pub const fn put(path: &'static str) -> Self {
        Self::new(Method::Put, path)
    }

    /// The path with its placeholders filled, in order.
    pub fn url_path(&self, params: &P) -> String {
        let segments = params.segments();
        let mut segments = segments.iter();
        let mut out = String::with_capacity(self.path.len() + 36 * P::COUNT);
        let mut rest = self.path;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let close = rest[open..].find('}').map_or(rest.len(), |i| open + i + 1);
            if let Some(segment) = segments.next() {
                out.push_str(segment);
            }
            rest = &rest[close..];
        }
        out.push_str(rest);
        out
    }
}

const fn placeholders(path: &str) -> usize {
    let bytes = path.as_bytes();
    let mut count = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'{' {
            count += 1;
        }
        i += 1;
    }
    count
}

pub use crate::ids::PathSegment;

/// What fills an endpoint's placeholders.
pub trait PathParams {
    const COUNT: usize;
    fn segments(&self) -> Vec<String>;
}

impl PathParams for () {
    const COUNT: usize = 0;
    fn segments(&self) -> Vec<String> {
        Vec::new()
    }
}

impl<A: PathSegment> PathParams for A {
    const COUNT: usize = 1;
    fn segments(&self) -> Vec<String> {
        vec![self.to_string()]
    }
}

impl<A: PathSegment, B: PathSegment> PathParams for (A, B) {
    const COUNT: usize = 2;
    fn segments(&self) -> Vec<String> {
        vec![self.0.to_string(), self.1.to_string()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{InvoiceId, TenantId};
    use uuid::Uuid;

    #[test]
    fn placeholders_are_filled_in_order() {
        const EP: Endpoint<(TenantId, InvoiceId), (), ()> =
            Endpoint::get("/internal/invoices/{tenant_id}/{invoice_id}/usage.csv");
        let (t, i) = (TenantId(Uuid::nil()), InvoiceId(Uuid::max()));
        assert_eq!(
            EP.url_path(&(t, i)),
            format!("/internal/invoices/{t}/{i}/usage.csv")
        );
        const NONE: Endpoint<(), (), ()> = Endpoint::post("/internal/invoices/run");
        assert_eq!(NONE.url_path(&()), "/internal/invoices/run");
    }
}

//! The built web front end (`web/`, built by `make web` into `web/dist`),
//! served at `/portal` and `/billing`. The front end is one Vite app whose
//! assets are built with the base `/portal/`; both routes serve the same
//! `index.html`, which picks its page from the path.
//!
//! A path under a route is a file of the build when one exists (the hashed
//! `assets/...`), a 404 when it looks like a file (has an extension) and
//! does not exist, and otherwise `index.html`, so that a reload of a
//! client-side route works. The directory is read at each request: a build
//! made while the gateway runs is served at once, and a gateway started
//! without one answers 404 with what to run.

use std::path::{Component, Path, PathBuf};

use actix_web::http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, web};

/// The routes the front end is served at.
pub const ROUTES: [&str; 2] = ["/portal", "/billing"];

pub const NOT_BUILT: &str = "the web front end is not built: run `make web`\n";

/// Where the build is (`GPUMARKET_WEB_DIR`).
#[derive(Clone)]
pub struct WebDir(pub PathBuf);

/// Adds the front end's routes to an app.
pub fn configure(cfg: &mut web::ServiceConfig, dir: PathBuf) {
    cfg.app_data(web::Data::new(WebDir(dir)));
    for route in ROUTES {
        cfg.route(route, web::get().to(page))
            .route(&format!("{route}/{{tail:.*}}"), web::get().to(page));
    }
}

async fn page(dir: web::Data<WebDir>, req: HttpRequest) -> HttpResponse {
    let dir = dir.0.clone();
    let tail = req.match_info().get("tail").unwrap_or("").to_owned();
    match web::block(move || resolve(&dir, &tail)).await {
        Ok(found) => found.respond(),
        Err(_) => HttpResponse::InternalServerError().finish(),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Resolved {
    NotBuilt,
    NotFound,
    File {
        bytes: Vec<u8>,
        path: PathBuf,
        index: bool,
    },
}

impl Resolved {
    fn respond(self) -> HttpResponse {
        match self {
            Resolved::NotBuilt => HttpResponse::NotFound()
                .content_type("text/plain; charset=utf-8")
                .body(NOT_BUILT),
            Resolved::NotFound => HttpResponse::NotFound()
                .content_type("text/plain; charset=utf-8")
                .body("not found\n"),
            Resolved::File { bytes, path, index } => {
                let mut response = HttpResponse::Ok();
                response.insert_header((CONTENT_TYPE, HeaderValue::from_static(mime(&path))));
                // Vite names assets by their content hash; the page itself
                // must be fetched again to pick up a new build.
                let cache = if index {
                    "no-cache"
                } else {
                    "public, max-age=31536000, immutable"
                };
                response.insert_header((CACHE_CONTROL, HeaderValue::from_static(cache)));
                response.body(bytes)
            }
        }
    }
}

fn resolve(dir: &Path, tail: &str) -> Resolved {
    let index = dir.join("index.html");
    if !index.is_file() {
        return Resolved::NotBuilt;
    }
    let tail = tail.trim_matches('/');
    if !tail.is_empty() {
        let relative = Path::new(tail);
        // Only plain names: no `..`, no root, no `.`-files.
        let plain = relative.components().all(|c| match c {
            Component::Normal(name) => !name.to_string_lossy().starts_with('.'),
            _ => false,
        });
        if !plain || tail.contains('\\') {
            return Resolved::NotFound;
        }
        let path = dir.join(relative);
        if path.is_file() {
            return match std::fs::read(&path) {
                Ok(bytes) => Resolved::File {
                    bytes,
                    path,
                    index: false,
                },
                Err(_) => Resolved::NotFound,
            };
        }
        let last = relative
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        if last.is_some_and(|name| name.contains('.')) {
            return Resolved::NotFound;
        }
    }
    match std::fs::read(&index) {
        Ok(bytes) => Resolved::File {
            bytes,
            path: index,
            index: true,
        },
        Err(_) => Resolved::NotBuilt,
    }
}

fn mime(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "woff" => "font/woff",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use actix_web::http::StatusCode;
    use actix_web::{App, test};

    use super::*;

    fn temp_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gpumarket-web-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    async fn get(dir: &Path, uri: &str) -> (StatusCode, String, String) {
        let app =
            test::init_service(App::new().configure(|cfg| configure(cfg, dir.to_path_buf()))).await;
        let response =
            test::call_service(&app, test::TestRequest::get().uri(uri).to_request()).await;
        let status = response.status();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let body = test::read_body(response).await;
        (
            status,
            content_type,
            String::from_utf8_lossy(&body).into_owned(),
        )
    }

    #[actix_web::test]
    async fn missing_build_answers_404_with_what_to_run() {
        let dir = temp_dir().join("dist");
        for uri in ["/portal", "/portal/", "/billing", "/portal/assets/app.js"] {
            let (status, _, body) = get(&dir, uri).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{uri}");
            assert_eq!(body, NOT_BUILT, "{uri}");
        }
    }

    #[actix_web::test]
    async fn serves_index_for_routes_and_files_from_the_build() {
        let dir = temp_dir();
        std::fs::write(dir.join("index.html"), "<!doctype html><div id=root></div>").unwrap();
        std::fs::create_dir_all(dir.join("assets")).unwrap();
        std::fs::write(dir.join("assets/app-1234.js"), "console.log(1)").unwrap();
        std::fs::write(dir.join(".secret"), "no").unwrap();

        for uri in [
            "/portal",
            "/portal/",
            "/billing",
            "/portal/machines/42",
            "/billing/x",
        ] {
            let (status, content_type, body) = get(&dir, uri).await;
            assert_eq!(status, StatusCode::OK, "{uri}");
            assert!(
                content_type.starts_with("text/html"),
                "{uri}: {content_type}"
            );
            assert!(body.contains("id=root"), "{uri}");
        }
        for uri in ["/portal/assets/app-1234.js", "/billing/assets/app-1234.js"] {
            let (status, content_type, body) = get(&dir, uri).await;
            assert_eq!(status, StatusCode::OK, "{uri}");
            assert!(content_type.starts_with("text/javascript"), "{uri}");
            assert_eq!(body, "console.log(1)");
        }
        for uri in [
            "/portal/assets/missing.js",
            "/portal/.secret",
            "/portal/../Cargo.toml",
            "/portal/assets/%2e%2e/%2e%2e/etc/passwd",
        ] {
            let (status, _, _) = get(&dir, uri).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{uri}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! `GET /console`: the operator console (docs/operations.md#the-console), one page whose three
//! files are built into the binary. The files hold no data and need no credential, like a login
//! page; everything the page shows it fetches from the operator API with the gateway token,
//! which the operator types into it. The Content-Security-Policy allows the page's own script and
//! style and its own origin for API calls, and nothing else: no inline script, no other origin,
//! no framing.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

const PAGE: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/console.js");
const STYLE: &str = include_str!("console/console.css");
const OVERVIEW_STYLE: &str = include_str!("console/overview.css");
const REPLAY_SCRIPT: &str = include_str!("console/replay.js");
const RUNS_BULK_SCRIPT: &str = include_str!("console/runs_bulk.js");
const OVERVIEW_SCRIPT: &str = include_str!("console/overview.js");
const HOOKS_SCRIPT: &str = include_str!("console/hooks.js");
const OUTBOUND_SCRIPT: &str = include_str!("console/outbound.js");

const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
     img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `GET /console`.
pub async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

/// `GET /console/console.js`.
pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /console/replay.js`: bulk replay (docs/operations.md#replaying-in-bulk).
pub async fn replay_script() -> Response {
    asset("text/javascript; charset=utf-8", REPLAY_SCRIPT)
}

/// `GET /console/runs_bulk.js`: runs in bulk (docs/operations.md#runs-in-bulk).
pub async fn runs_bulk_script() -> Response {
    asset("text/javascript; charset=utf-8", RUNS_BULK_SCRIPT)
}

/// `GET /console/overview.js`: the overview's charts (docs/operations.md#the-overview), drawn
/// as SVG elements by the script itself: no library, no other origin, no inline style.
pub async fn overview_script() -> Response {
    asset("text/javascript; charset=utf-8", OVERVIEW_SCRIPT)
}

/// `GET /console/hooks.js`: subscriptions (docs/subscriptions.md) and their audit.
pub async fn hooks_script() -> Response {
    asset("text/javascript; charset=utf-8", HOOKS_SCRIPT)
}

/// `GET /console/outbound.js`: callbacks and lifecycle webhooks (docs/outbound.md), and
/// sending a failed one again.
pub async fn outbound_script() -> Response {
    asset("text/javascript; charset=utf-8", OUTBOUND_SCRIPT)
}

/// `GET /console/console.css`.
pub async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// `GET /console/overview.css`: the overview's layout and the colours of its charts.
pub async fn overview_style() -> Response {
    asset("text/css; charset=utf-8", OVERVIEW_STYLE)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

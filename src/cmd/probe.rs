//! `tether probe`: one GET of an edge's probe, for health checks where no
//! shell or curl exists (the distroless image's `HEALTHCHECK`).

use std::time::Duration;

use http_body_util::BodyExt;

use crate::common::parse_ttl;

/// Flags of `tether probe`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The probe to ask: /healthz (the process runs) or /readyz (it takes new sessions).
    #[arg(long, default_value = "http://127.0.0.1:7878/healthz")]
    url: String,
    /// How long the answer may take, e.g. 2s.
    #[arg(long, default_value = "2s", value_parser = parse_ttl)]
    timeout: Duration,
}

/// Exits 0 on a 200 answer; otherwise says what it got, and fails.
pub(crate) async fn run(args: Args) -> Result<(), String> {
    let uri: http::Uri = args.url.parse().map_err(|e| format!("--url {}: {e}", args.url))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!("--url {}: only http:// (the edge's own port; TLS ends at the proxy)", args.url));
    }
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .ok_or_else(|| format!("--url {}: no host", args.url))?;
    let answer = tokio::time::timeout(args.timeout, get(&authority, &uri))
        .await
        .map_err(|_| format!("{}: no answer within {:?}", args.url, args.timeout))??;
    match answer {
        (200, _) => Ok(()),
        (status, body) => Err(format!("{}: {status} {}", args.url, body.trim())),
    }
}

async fn get(authority: &str, uri: &http::Uri) -> Result<(u16, String), String> {
    let failed = |e: &dyn std::fmt::Display| format!("{uri}: {e}");
    let stream = tokio::net::TcpStream::connect(authority).await.map_err(|e| failed(&e))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| failed(&e))?;
    let conn = tokio::spawn(conn);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let request = http::Request::get(path)
        .header(http::header::HOST, authority)
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| failed(&e))?;
    let response = sender.send_request(request).await.map_err(|e| failed(&e))?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.map_err(|e| failed(&e))?.to_bytes();
    conn.abort();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

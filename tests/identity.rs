//! Tokens from the user's identity provider (RS256 / ES256 against a JWKS) at
//! a real edge: both links and the turn's user credential accept them, every
//! bad one is refused at the upgrade with 401 and counted by its reason, a key
//! rotation admits the new key while connected devices stay, and an outage of
//! the key endpoint keeps the last good keys. The keys are checked-in,
//! test-only (`proto-fixtures/test-keys`); the JWKS is served on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use common::{test_config, wait_until, LiveEdge};
use tether_contract::backend::{CallMeta, CallParams};
use tether_edge::idp::{IdpConfig, JwksSource};
use tether_harness::device::tool;
use tether_harness::{DeviceSpec, SimDevice};

const ISSUER: &str = "https://idp.test/";
const APP_AUDIENCE: &str = "tether-app";
const AGENT_AUDIENCE: &str = "tether-agents";

fn key_file(name: &str) -> String {
    std::fs::read_to_string(format!("{}/proto-fixtures/test-keys/{name}", env!("CARGO_MANIFEST_DIR")))
        .unwrap()
}

/// A JWKS endpoint on loopback whose document (or outage) the test sets.
struct JwksServer {
    url: String,
    document: Arc<Mutex<Option<String>>>,
    fetches: Arc<AtomicUsize>,
}

impl JwksServer {
    async fn start(document: &str) -> JwksServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/.well-known/jwks.json", listener.local_addr().unwrap());
        let document = Arc::new(Mutex::new(Some(document.to_owned())));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (doc, count) = (Arc::clone(&document), Arc::clone(&fetches));
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let reply = match doc.lock().unwrap().clone() {
                    Some(body) => format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    ),
                    None => "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".into(),
                };
                let _ = s.write_all(reply.as_bytes()).await;
            }
        });
        JwksServer { url, document, fetches }
    }

    fn serve(&self, document: Option<&str>) {
        *self.document.lock().unwrap() = document.map(str::to_owned);
    }
}

async fn edge_trusting(jwks: &JwksServer) -> LiveEdge {
    let mut config = test_config();
    let mut idp = IdpConfig::new(JwksSource::Url(jwks.url.clone()));
    idp.issuer = Some(ISSUER.into());
    idp.client_audience = APP_AUDIENCE.into();
    idp.backend_audience = AGENT_AUDIENCE.into();
    config.identity = Some(idp);
    LiveEdge::start_with(config).await
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// A token as the identity provider would sign it.
fn idp_token(alg: Algorithm, kid: Option<&str>, pem: &str, claims: serde_json::Value) -> String {
    let key = match alg {
        Algorithm::ES256 => EncodingKey::from_ec_pem(pem.as_bytes()).unwrap(),
        Algorithm::HS256 => EncodingKey::from_secret(pem.as_bytes()),
        _ => EncodingKey::from_rsa_pem(pem.as_bytes()).unwrap(),
    };
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, &claims, &key).unwrap()
}

fn claims(sub: &str, aud: &str) -> serde_json::Value {
    json!({"sub": sub, "aud": aud, "iss": ISSUER, "exp": now() + 600, "iat": now()})
}

fn rsa_a(sub: &str, aud: &str) -> String {
    idp_token(Algorithm::RS256, Some("test-rsa-a"), &key_file("rsa-a.pem"), claims(sub, aud))
}

/// Tries a device upgrade with `token`; the HTTP status of a refusal.
async fn try_device(edge: &LiveEdge, token: &str) -> Result<(), u16> {
    let mut req = format!("{}/v1/client", edge.url).into_client_request().unwrap();
    req.headers_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Ok(_) => Ok(()),
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => Err(r.status().as_u16()),
        Err(e) => panic!("upgrade: {e}"),
    }
}

fn refusals(edge: &LiveEdge, reason: &str) -> u64 {
    let text = edge.hub.metrics.render();
    let series = format!("tether_auth_refusals_total{{reason=\"{reason}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&series)).map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test]
async fn identity_provider_tokens_open_both_links_and_every_bad_one_is_refused_with_its_reason() {
    let jwks = JwksServer::start(&key_file("all.jwks.json")).await;
    let edge = edge_trusting(&jwks).await;

    // RS256 and ES256 devices, as the provider signed them.
    let spec = DeviceSpec::minimal(vec![tool("a")]);
    let mut rsa_device =
        SimDevice::connect(&edge.url, &rsa_a("mira", APP_AUDIENCE), spec.clone()).await.unwrap();
    let session = rsa_device.ready().await.unwrap();
    let es =
        idp_token(Algorithm::ES256, Some("test-ec-c"), &key_file("ec-c.pem"), claims("leo", APP_AUDIENCE));
    SimDevice::connect(&edge.url, &es, spec).await.unwrap().ready().await.unwrap();
    // The edge's own HS256 tokens stay accepted beside them.
    assert_eq!(try_device(&edge, &edge.client_token("mira")).await, Ok(()));

    // A backend on the provider's token, calling for the turn's user with the provider's token.
    let backend = rsa_a("agent-service", AGENT_AUDIENCE);
    let link = tether_core::BackendLink::connect(&edge.url, &backend).await.unwrap();
    let meta = CallMeta { credential: Some(rsa_a("mira", APP_AUDIENCE)), ..CallMeta::default() };
    let call = CallParams { session: session.clone(), name: "client__a".into(), arguments: json!({}), meta };
    link.call(call.clone(), Duration::from_secs(12)).await.unwrap();
    // Another user's provider token does not reach mira's session.
    let leo = CallParams {
        meta: CallMeta { credential: Some(rsa_a("leo", APP_AUDIENCE)), ..CallMeta::default() },
        ..call
    };
    let err = link.call(leo, Duration::from_secs(12)).await.unwrap_err();
    assert_eq!(err.kind, tether_contract::ErrorKind::Forbidden);

    let rsa_b = key_file("rsa-b.pem");
    let alg_none = {
        use base64::Engine;
        let b64 =
            |v: serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        format!("{}.{}.", b64(json!({"alg": "none", "typ": "JWT"})), b64(claims("mira", APP_AUDIENCE)))
    };
    let mut expired = claims("mira", APP_AUDIENCE);
    expired["exp"] = json!(now() - 3600);
    let mut other_issuer = claims("mira", APP_AUDIENCE);
    other_issuer["iss"] = json!("https://evil.test/");
    let refused = [
        (
            "unknown_kid",
            idp_token(Algorithm::RS256, Some("not-published"), &rsa_b, claims("mira", APP_AUDIENCE)),
        ),
        ("alg_none", alg_none),
        // The provider's public key used as an HMAC secret, under its key id.
        (
            "hs256_with_public_key",
            idp_token(
                Algorithm::HS256,
                Some("test-rsa-a"),
                &key_file("rsa-a.pub.pem"),
                claims("mira", APP_AUDIENCE),
            ),
        ),
        ("expired", idp_token(Algorithm::RS256, Some("test-rsa-a"), &key_file("rsa-a.pem"), expired)),
        (
            "wrong_issuer",
            idp_token(Algorithm::RS256, Some("test-rsa-a"), &key_file("rsa-a.pem"), other_issuer),
        ),
        ("wrong_audience", rsa_a("mira", "tether-client")),
        // Signed by key b under a's id.
        (
            "bad_signature",
            idp_token(Algorithm::RS256, Some("test-rsa-a"), &rsa_b, claims("mira", APP_AUDIENCE)),
        ),
    ];
    for (reason, token) in refused {
        assert_eq!(try_device(&edge, &token).await, Err(401), "{reason}");
        assert_eq!(refusals(&edge, reason), 1, "{reason} counted by its reason");
    }
    assert!(edge.hub.counters().get("auth_refused") >= 7);
}

#[tokio::test]
async fn a_key_rotation_admits_the_new_key_while_connected_devices_stay() {
    let jwks = JwksServer::start(&key_file("rsa-a.jwks.json")).await;
    let edge = edge_trusting(&jwks).await;
    let mut old =
        SimDevice::connect(&edge.url, &rsa_a("mira", APP_AUDIENCE), DeviceSpec::minimal(vec![tool("a")]))
            .await
            .unwrap();
    let old_session = old.ready().await.unwrap();
    assert_eq!(edge.hub.counters().get("jwks_refreshes"), 1, "loaded once at start");

    // The provider rotates: key b replaces key a.
    jwks.serve(Some(&key_file("rsa-b.jwks.json")));
    let new_token =
        idp_token(Algorithm::RS256, Some("test-rsa-b"), &key_file("rsa-b.pem"), claims("mira", APP_AUDIENCE));
    // The first token under the new key finds it unknown and triggers a refresh...
    assert_eq!(try_device(&edge, &new_token).await, Err(401));
    wait_until(|| edge.hub.counters().get("jwks_refreshes") == 2).await;
    // ...after which it is admitted.
    assert_eq!(try_device(&edge, &new_token).await, Ok(()));
    // Made-up key ids right after cannot make the edge fetch again.
    let fetches = jwks.fetches.load(Ordering::SeqCst);
    let made_up =
        idp_token(Algorithm::RS256, Some("made-up"), &key_file("rsa-b.pem"), claims("mira", APP_AUDIENCE));
    assert_eq!(try_device(&edge, &made_up).await, Err(401));
    assert_eq!(edge.hub.counters().get("jwks_refreshes_rate_limited"), 1);
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), fetches);

    // The device admitted under the old key is still connected and callable.
    let link = edge.backend().await;
    let meta = CallMeta { credential: Some(common::user("mira")), ..CallMeta::default() };
    let call = CallParams { session: old_session, name: "client__a".into(), arguments: json!({}), meta };
    link.call(call, Duration::from_secs(12)).await.unwrap();
    assert_eq!(old.observed.calls().len(), 1);
}

#[tokio::test]
async fn an_outage_of_the_key_endpoint_keeps_the_last_good_keys() {
    let jwks = JwksServer::start(&key_file("rsa-a.jwks.json")).await;
    let edge = edge_trusting(&jwks).await;
    jwks.serve(None);
    let idp = edge.hub.auth.idp().unwrap();
    assert!(idp.refresh().await.is_err(), "the endpoint answers 503");
    assert_eq!(edge.hub.counters().get("jwks_refresh_failures"), 1);
    assert_eq!(idp.key_ids(), ["test-rsa-a"], "the last good keys are kept");
    assert_eq!(try_device(&edge, &rsa_a("mira", APP_AUDIENCE)).await, Ok(()));
    let text = edge.hub.metrics.render();
    assert!(text.contains("tether_jwks_refresh_failures_total 1"), "{text}");
}

#[tokio::test]
async fn an_edge_whose_key_file_cannot_load_does_not_start() {
    let mut config = test_config();
    config.identity = Some(IdpConfig::new(JwksSource::File("/nonexistent/jwks.json".into())));
    let Err(err) = tether_edge::Edge::bind(config).await else { panic!("a missing key file is fatal") };
    assert!(err.to_string().contains("jwks file /nonexistent/jwks.json"), "{err}");
}

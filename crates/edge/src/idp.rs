//! Tokens from the user's identity provider: RS256 / ES256 (any asymmetric
//! JOSE algorithm) verified against the keys it publishes as a JWKS.
//!
//! The key set comes from a file or a URL, is cached, and is refreshed on an
//! interval and when a token names a key id the cache does not know (at most
//! once per `unknown_kid_interval`, one refresh at a time). A refresh that
//! fails keeps the last good keys, and is counted and logged. The edge's own
//! HS256 tokens are verified elsewhere (`auth`); this module never accepts an
//! HMAC algorithm, so a token "signed" with a public key as an HMAC secret
//! cannot pass here.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use jsonwebtoken::errors::ErrorKind as JwtErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use prometheus_client::metrics::counter::Counter;
use serde::Deserialize;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use tether_counters::{fallback, Fallback};

use crate::auth::{AuthError, Claims, Link, LEEWAY_SECS};
use crate::lock;

/// Largest JWKS document the edge reads.
const MAX_JWKS_BYTES: usize = 1 << 20;
/// How long one JWKS fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Refresh interval while no key set was ever loaded.
const EMPTY_RETRY: Duration = Duration::from_secs(30);

/// Where the identity provider's keys are published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    /// A JWKS document on disk.
    File(PathBuf),
    /// A JWKS document at an `http(s)://` URL.
    Url(String),
}

/// How the edge verifies the identity provider's tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdpConfig {
    /// Where the keys are.
    pub jwks: JwksSource,
    /// The `iss` every token must carry, when set.
    pub issuer: Option<String>,
    /// The `aud` a device token (and a turn's user credential) must carry.
    pub client_audience: String,
    /// The `aud` a backend token must carry.
    pub backend_audience: String,
    /// How often the key set is re-read.
    pub refresh: Duration,
    /// Least time between two refreshes triggered by unknown key ids.
    pub unknown_kid_interval: Duration,
}

impl IdpConfig {
    /// A configuration with the default audiences and intervals.
    pub fn new(jwks: JwksSource) -> IdpConfig {
        IdpConfig {
            jwks,
            issuer: None,
            client_audience: tether_contract::AUD_CLIENT.to_owned(),
            backend_audience: tether_contract::AUD_BACKEND.to_owned(),
            refresh: Duration::from_secs(300),
            unknown_kid_interval: Duration::from_secs(10),
        }
    }

    fn audience(&self, link: Link) -> &str {
        match link {
            Link::Client => &self.client_audience,
            Link::Backend => &self.backend_audience,
            // Never asked: the verifier keeps operator tokens to the edge's own keys.
            Link::Operator => tether_contract::AUD_OPERATOR,
        }
    }
}

/// Why a key set could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum IdpError {
    /// The file could not be read.
    #[error("jwks file {path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The URL could not be fetched.
    #[error("jwks url {url}: {reason}")]
    Fetch {
        /// The URL.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// The document is not a JWKS, or has no usable key.
    #[error("jwks: {0}")]
    Document(String),
}

/// The counters the key set reports to (shared with the edge's registry).
#[derive(Debug, Clone, Default)]
pub struct IdpCounters {
    /// Key sets loaded.
    pub refreshes: Counter,
    /// Loads that failed (the last good keys stay in use).
    pub refresh_failures: Fallback,
    /// Refreshes skipped because an unknown key id asked too soon after the last.
    pub refreshes_rate_limited: Fallback,
}

/// One verification key.
#[derive(Clone)]
struct VerifyKey {
    alg: Algorithm,
    key: DecodingKey,
}

#[derive(Debug, Default)]
struct Gate {
    in_flight: bool,
    last_unknown_kid: Option<Instant>,
}

/// The identity provider's keys, cached and refreshed.
pub struct Idp {
    config: IdpConfig,
    keys: RwLock<Arc<HashMap<String, VerifyKey>>>,
    gate: Mutex<Gate>,
    counters: IdpCounters,
    http: reqwest::Client,
}

impl std::fmt::Debug for Idp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idp").field("jwks", &self.config.jwks).field("keys", &self.key_ids()).finish()
    }
}

/// Claims an identity provider's token carries; `aud` and `iss` are checked
/// by validation, not read (an `aud` may be a list).
#[derive(Debug, Deserialize)]
struct IdpClaims {
    sub: String,
    exp: u64,
    #[serde(default)]
    nbf: u64,
    #[serde(default)]
    iat: u64,
}

impl Idp {
    /// Builds the key set and loads it once. A file that cannot be loaded is
    /// an error (configuration the edge cannot start with); a URL that cannot
    /// be fetched starts the edge with no identity-provider keys, counted and
    /// retried every 30 s.
    pub async fn load(config: IdpConfig, counters: IdpCounters) -> Result<Arc<Idp>, IdpError> {
        // rustls needs one process-wide crypto provider; a second install is a no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .build()
            .map_err(|e| IdpError::Fetch { url: String::new(), reason: e.to_string() })?;
        let idp = Arc::new(Idp { config, keys: RwLock::default(), gate: Mutex::default(), counters, http });
        match (idp.refresh().await, &idp.config.jwks) {
            (Ok(_), _) => {}
            (Err(e), JwksSource::File(_)) => return Err(e),
            (Err(e), JwksSource::Url(_)) => {
                warn!(error = %e, "identity provider keys unavailable at start; its tokens are refused until a refresh succeeds");
            }
        }
        Ok(idp)
    }

    /// The key ids in the cache, sorted.
    pub fn key_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.current().keys().cloned().collect();
        ids.sort();
        ids
    }

    fn current(&self) -> Arc<HashMap<String, VerifyKey>> {
        match self.keys.read() {
            Ok(k) => Arc::clone(&k),
            Err(p) => Arc::clone(&p.into_inner()),
        }
    }

    /// Whether `kid` names one of the provider's keys.
    pub fn knows(&self, kid: &str) -> bool {
        self.current().contains_key(kid)
    }

    /// Verifies a token the provider signed with `alg` under key `kid`, for `link`.
    pub fn verify(
        self: &Arc<Self>,
        token: &str,
        kid: Option<&str>,
        alg: Algorithm,
        link: Link,
    ) -> Result<Claims, AuthError> {
        let Some(kid) = kid else { return Err(AuthError::UnknownKey) };
        let Some(key) = self.current().get(kid).cloned() else {
            self.refresh_for_unknown_kid(kid);
            return Err(AuthError::UnknownKey);
        };
        if key.alg != alg {
            return Err(AuthError::WrongAlgorithm);
        }
        let audience = self.config.audience(link);
        let mut validation = Validation::new(alg);
        let mut required = vec!["exp", "aud", "sub"];
        if let Some(issuer) = &self.config.issuer {
            validation.set_issuer(&[issuer]);
            required.push("iss");
        }
        validation.set_required_spec_claims(&required);
        validation.validate_nbf = true;
        validation.leeway = LEEWAY_SECS;
        validation.set_audience(&[audience]);
        let claims =
            jsonwebtoken::decode::<IdpClaims>(token, &key.key, &validation).map_err(|e| match e.kind() {
                JwtErrorKind::InvalidIssuer => AuthError::WrongIssuer,
                _ => AuthError::from_jwt(&e),
            })?;
        let c = claims.claims;
        Ok(Claims { sub: c.sub, aud: audience.to_owned(), exp: c.exp, nbf: c.nbf, iat: c.iat })
    }

    /// Starts a refresh for a key id the cache does not know: the provider may
    /// have rotated. One at a time, and at most once per `unknown_kid_interval`
    /// (a flood of made-up key ids must not become a flood of fetches).
    fn refresh_for_unknown_kid(self: &Arc<Self>, kid: &str) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        {
            let mut gate = lock(&self.gate);
            let now = Instant::now();
            let recent = gate
                .last_unknown_kid
                .is_some_and(|t| now.saturating_duration_since(t) < self.config.unknown_kid_interval);
            if gate.in_flight || recent {
                fallback!(
                    self.counters.refreshes_rate_limited,
                    debug,
                    kid,
                    "unknown key id; a refresh ran too recently or is running"
                );
                return;
            }
            gate.in_flight = true;
            gate.last_unknown_kid = Some(now);
        }
        info!(kid, "token names an unknown key id; refreshing the identity provider's keys");
        let idp = Arc::clone(self);
        runtime.spawn(async move {
            let _ = idp.refresh().await;
            lock(&idp.gate).in_flight = false;
        });
    }

    /// Loads the key set now; on failure the last good keys stay in use.
    pub async fn refresh(&self) -> Result<usize, IdpError> {
        match self.fetch().await.and_then(|doc| parse(&doc)) {
            Ok(keys) => {
                let n = keys.len();
                let mut ids: Vec<&String> = keys.keys().collect();
                ids.sort();
                info!(keys = ?ids, "identity provider keys loaded");
                match self.keys.write() {
                    Ok(mut k) => *k = Arc::new(keys),
                    Err(p) => *p.into_inner() = Arc::new(keys),
                }
                self.counters.refreshes.inc();
                Ok(n)
            }
            Err(e) => {
                fallback!(self.counters.refresh_failures, warn, error = %e, kept = self.current().len(), "identity provider keys could not be refreshed; keeping the last good keys");
                Err(e)
            }
        }
    }

    async fn fetch(&self) -> Result<Vec<u8>, IdpError> {
        match &self.config.jwks {
            JwksSource::File(path) => {
                tokio::fs::read(path).await.map_err(|source| IdpError::File { path: path.clone(), source })
            }
            JwksSource::Url(url) => {
                let fail = |reason: String| IdpError::Fetch { url: url.clone(), reason };
                let response = self.http.get(url).send().await.map_err(|e| fail(e.to_string()))?;
                if !response.status().is_success() {
                    return Err(fail(format!("HTTP {}", response.status())));
                }
                if response.content_length().is_some_and(|n| n > MAX_JWKS_BYTES as u64) {
                    return Err(fail(format!("document larger than {MAX_JWKS_BYTES} bytes")));
                }
                let body = response.bytes().await.map_err(|e| fail(e.to_string()))?;
                if body.len() > MAX_JWKS_BYTES {
                    return Err(fail(format!("document larger than {MAX_JWKS_BYTES} bytes")));
                }
                Ok(body.to_vec())
            }
        }
    }

    /// Re-reads the key set every `refresh` (every 30 s while none ever loaded) until `shutdown`.
    pub fn spawn_refresher(self: &Arc<Self>, shutdown: CancellationToken) {
        let idp = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                let wait = if idp.current().is_empty() { EMPTY_RETRY } else { idp.config.refresh };
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.cancelled() => return,
                }
                let _ = idp.refresh().await;
            }
        });
    }
}

/// The algorithm a key is for: its `alg`, else what its type implies.
/// HMAC keys are never accepted from a provider.
fn algorithm_of(jwk: &Jwk) -> Option<Algorithm> {
    if let Some(alg) = jwk.common.key_algorithm {
        return match alg {
            KeyAlgorithm::RS256 => Some(Algorithm::RS256),
            KeyAlgorithm::RS384 => Some(Algorithm::RS384),
            KeyAlgorithm::RS512 => Some(Algorithm::RS512),
            KeyAlgorithm::PS256 => Some(Algorithm::PS256),
            KeyAlgorithm::PS384 => Some(Algorithm::PS384),
            KeyAlgorithm::PS512 => Some(Algorithm::PS512),
            KeyAlgorithm::ES256 => Some(Algorithm::ES256),
            KeyAlgorithm::ES384 => Some(Algorithm::ES384),
            KeyAlgorithm::EdDSA => Some(Algorithm::EdDSA),
            _ => None,
        };
    }
    match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Some(Algorithm::RS256),
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => Some(Algorithm::ES256),
            EllipticCurve::P384 => Some(Algorithm::ES384),
            _ => None,
        },
        AlgorithmParameters::OctetKeyPair(_) => Some(Algorithm::EdDSA),
        AlgorithmParameters::OctetKey(_) => None,
    }
}

/// Reads a JWKS document. Keys without a `kid`, of a refused kind, or that do
/// not decode are skipped with a log line; a document with no usable key is an error.
fn parse(doc: &[u8]) -> Result<HashMap<String, VerifyKey>, IdpError> {
    #[derive(Deserialize)]
    struct Document {
        keys: Vec<Value>,
    }
    let doc: Document =
        serde_json::from_slice(doc).map_err(|e| IdpError::Document(format!("not a JWKS: {e}")))?;
    let mut keys = HashMap::new();
    for raw in doc.keys {
        let jwk: Jwk = match serde_json::from_value(raw) {
            Ok(jwk) => jwk,
            Err(e) => {
                warn!(error = %e, "jwks key skipped: not a key this edge can read");
                continue;
            }
        };
        let Some(kid) = jwk.common.key_id.clone() else {
            warn!("jwks key skipped: no kid");
            continue;
        };
        let Some(alg) = algorithm_of(&jwk) else {
            warn!(kid, "jwks key skipped: not an asymmetric signing key");
            continue;
        };
        match DecodingKey::from_jwk(&jwk) {
            Ok(key) => {
                keys.insert(kid, VerifyKey { alg, key });
            }
            Err(e) => warn!(kid, error = %e, "jwks key skipped: does not decode"),
        }
    }
    if keys.is_empty() {
        return Err(IdpError::Document("no usable signing key".into()));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &str = include_str!("../../../proto-fixtures/test-keys/all.jwks.json");

    #[test]
    fn a_jwks_yields_its_asymmetric_keys_and_skips_the_rest() {
        let keys = parse(ALL.as_bytes()).unwrap();
        let mut ids: Vec<_> = keys.iter().map(|(k, v)| (k.as_str(), v.alg)).collect();
        ids.sort_by_key(|(k, _)| *k);
        assert_eq!(
            ids,
            [
                ("test-ec-c", Algorithm::ES256),
                ("test-rsa-a", Algorithm::RS256),
                ("test-rsa-b", Algorithm::RS256)
            ]
        );
        let hmac = r#"{"keys":[{"kty":"oct","kid":"h","k":"c2VjcmV0"},{"kty":"RSA","n":"AQAB","e":"AQAB"}]}"#;
        assert!(
            matches!(parse(hmac.as_bytes()), Err(IdpError::Document(_))),
            "an HMAC key or a key without kid is never used"
        );
        assert!(parse(b"[]").is_err());
    }
}

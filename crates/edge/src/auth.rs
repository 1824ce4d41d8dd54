//! Credentials: the edge's own HS256 JWTs and the secret they are signed
//! with, and the [`Verifier`] that also accepts the identity provider's tokens.
//!
//! The edge's own tokens use exactly one algorithm (HS256); `exp`, `nbf`,
//! `aud` and `sub` are required; the audience says which link the token opens.
//! The secret comes from `TETHER_JWT_SECRET`, else configuration, else a
//! random secret generated once into a 0600 file in the data directory, so
//! `tether token` and `tether serve` on one machine agree without any setup.
//! Identity-provider tokens (asymmetric, with a `kid`) go to [`crate::idp`].

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::errors::ErrorKind as JwtErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// Environment variable that overrides every other secret source.
pub const SECRET_ENV: &str = "TETHER_JWT_SECRET";
/// File name of the generated secret inside the data directory.
pub const SECRET_FILE: &str = "jwt-secret";
/// Clock skew tolerated on `exp` and `nbf`, in seconds.
pub const LEEWAY_SECS: u64 = 30;

/// Claims tether reads from a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The principal.
    pub sub: String,
    /// Which link: `tether-client` or `tether-backend`.
    pub aud: String,
    /// Expiry, seconds since the epoch.
    pub exp: u64,
    /// Not before, seconds since the epoch (presence is enforced by validation).
    #[serde(default)]
    pub nbf: u64,
    /// Issued at, seconds since the epoch.
    #[serde(default)]
    pub iat: u64,
}

/// Where the secret came from, for the startup log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// `TETHER_JWT_SECRET`.
    Env,
    /// The configuration.
    Config,
    /// An existing file in the data directory.
    File(PathBuf),
    /// A file this process just created.
    Created(PathBuf),
}

/// Signing and verifying keys derived from one secret.
#[derive(Clone)]
pub struct Keys {
    encoding: EncodingKey,
    decoding: DecodingKey,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys(..)")
    }
}

/// Why a token was refused; the name is logged and counted, never the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No credential was presented.
    #[error("no credential presented")]
    Missing,
    /// Not a decodable JWT, or a claim has the wrong type.
    #[error("credential is malformed")]
    Malformed,
    /// Signed with another key, or tampered.
    #[error("credential signature is invalid")]
    BadSignature,
    /// Signed with another algorithm (including `none`).
    #[error("credential uses a refused algorithm")]
    WrongAlgorithm,
    /// Past `exp`.
    #[error("credential has expired")]
    Expired,
    /// Before `nbf`.
    #[error("credential is not valid yet")]
    NotYetValid,
    /// `aud` does not name this link.
    #[error("credential is for another audience")]
    WrongAudience,
    /// A required claim is absent.
    #[error("credential lacks a required claim")]
    MissingClaim,
    /// `alg: none`: an unsigned token.
    #[error("credential is unsigned (alg none)")]
    AlgNone,
    /// Signed under a key id the identity provider does not publish (or none).
    #[error("credential names an unknown signing key")]
    UnknownKey,
    /// An HMAC token naming one of the provider's public keys: the classic
    /// confusion of a public key used as an HMAC secret.
    #[error("credential signs with HMAC under a public key's id")]
    KeyConfusion,
    /// `iss` is not the configured identity provider.
    #[error("credential is from another issuer")]
    WrongIssuer,
}

impl AuthError {
    /// Stable reason name for logs and counters.
    pub const fn as_str(self) -> &'static str {
        match self {
            AuthError::Missing => "missing",
            AuthError::Malformed => "malformed",
            AuthError::BadSignature => "bad_signature",
            AuthError::WrongAlgorithm => "wrong_algorithm",
            AuthError::Expired => "expired",
            AuthError::NotYetValid => "not_yet_valid",
            AuthError::WrongAudience => "wrong_audience",
            AuthError::MissingClaim => "missing_claim",
            AuthError::AlgNone => "alg_none",
            AuthError::UnknownKey => "unknown_kid",
            AuthError::KeyConfusion => "hs256_with_public_key",
            AuthError::WrongIssuer => "wrong_issuer",
        }
    }

    /// Classifies a verification failure from `jsonwebtoken`.
    pub(crate) fn from_jwt(e: &jsonwebtoken::errors::Error) -> AuthError {
        match e.kind() {
            JwtErrorKind::InvalidSignature => AuthError::BadSignature,
            JwtErrorKind::InvalidAlgorithm | JwtErrorKind::InvalidAlgorithmName => AuthError::WrongAlgorithm,
            JwtErrorKind::ExpiredSignature => AuthError::Expired,
            JwtErrorKind::ImmatureSignature => AuthError::NotYetValid,
            JwtErrorKind::InvalidAudience => AuthError::WrongAudience,
            JwtErrorKind::InvalidIssuer => AuthError::WrongIssuer,
            JwtErrorKind::MissingRequiredClaim(_) => AuthError::MissingClaim,
            _ => AuthError::Malformed,
        }
    }
}

/// Whether a token's header says `alg: none` (which `jsonwebtoken` cannot
/// even represent, so its own decoding calls it malformed). Classification
/// only: such a token is refused either way.
fn is_alg_none(token: &str) -> bool {
    use base64::Engine;
    let Some(header) = token.split('.').next() else { return false };
    let Ok(bytes) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(header.trim_end_matches('='))
    else {
        return false;
    };
    serde_json::from_slice::<serde_json::Value>(&bytes)
        .is_ok_and(|h| h.get("alg").and_then(|a| a.as_str()).is_some_and(|a| a.eq_ignore_ascii_case("none")))
}

/// Why the secret could not be loaded or created.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The file could not be read or written.
    #[error("jwt secret file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The secret is too short to be safe.
    #[error("jwt secret must be at least 32 bytes (got {0})")]
    TooShort(usize),
    /// The OS random source failed.
    #[error("could not generate a jwt secret: {0}")]
    Random(String),
}

/// Seconds since the epoch on this machine's clock (what `exp` and `nbf` are compared with).
pub(crate) fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl Keys {
    /// Keys for one raw secret.
    pub fn from_secret(secret: &[u8]) -> Result<Keys, SecretError> {
        if secret.len() < 32 {
            return Err(SecretError::TooShort(secret.len()));
        }
        Ok(Keys { encoding: EncodingKey::from_secret(secret), decoding: DecodingKey::from_secret(secret) })
    }

    /// Loads the secret by precedence: env, config, data-dir file, newly created file.
    pub fn load(configured: Option<&str>, data_dir: &Path) -> Result<(Keys, SecretSource), SecretError> {
        if let Ok(secret) = std::env::var(SECRET_ENV) {
            if !secret.is_empty() {
                return Ok((Keys::from_secret(secret.as_bytes())?, SecretSource::Env));
            }
        }
        if let Some(secret) = configured {
            return Ok((Keys::from_secret(secret.as_bytes())?, SecretSource::Config));
        }
        let path = data_dir.join(SECRET_FILE);
        let io = |source| SecretError::Io { path: path.clone(), source };
        match std::fs::read_to_string(&path) {
            Ok(secret) => {
                return Ok((Keys::from_secret(secret.trim().as_bytes())?, SecretSource::File(path)))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        let mut raw = [0u8; 32];
        getrandom::fill(&mut raw).map_err(|e| SecretError::Random(e.to_string()))?;
        let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::create_dir_all(data_dir).map_err(io)?;
        // Write a private temp file, then hard-link it into place: the link is
        // atomic and never overwrites, so a concurrent reader sees no half-written
        // secret and two first starts agree on one secret.
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(|e| SecretError::Random(e.to_string()))?;
        let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let tmp = data_dir.join(format!(".{SECRET_FILE}.{}.{nonce}", std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let tmp_io = |source| SecretError::Io { path: tmp.clone(), source };
        let mut file = options.open(&tmp).map_err(tmp_io)?;
        file.write_all(hex.as_bytes()).and_then(|()| file.sync_all()).map_err(tmp_io)?;
        drop(file);
        let linked = std::fs::hard_link(&tmp, &path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok((Keys::from_secret(hex.as_bytes())?, SecretSource::Created(path))),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let secret = std::fs::read_to_string(&path).map_err(io)?;
                Ok((Keys::from_secret(secret.trim().as_bytes())?, SecretSource::File(path)))
            }
            Err(e) => Err(io(e)),
        }
    }

    /// Signs a token for `sub` on audience `aud`, valid from now for `ttl`.
    pub fn issue(&self, sub: &str, aud: &str, ttl: Duration) -> Result<String, jsonwebtoken::errors::Error> {
        let now = now_secs();
        let claims =
            Claims { sub: sub.to_owned(), aud: aud.to_owned(), exp: now + ttl.as_secs(), nbf: now, iat: now };
        self.sign(&claims)
    }

    /// Signs arbitrary claims (tests use this for expired and future tokens).
    pub fn sign(&self, claims: &Claims) -> Result<String, jsonwebtoken::errors::Error> {
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &self.encoding)
    }

    /// Verifies one of the edge's own tokens for audience `aud`.
    pub fn verify(&self, token: &str, aud: &str) -> Result<Claims, AuthError> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_required_spec_claims(&["exp", "nbf", "aud", "sub"]);
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.leeway = LEEWAY_SECS;
        validation.set_audience(&[aud]);
        jsonwebtoken::decode::<Claims>(token, &self.decoding, &validation).map(|d| d.claims).map_err(|e| {
            match AuthError::from_jwt(&e) {
                // Only a token that did not decode is worth a second look at its header.
                AuthError::Malformed if is_alg_none(token) => AuthError::AlgNone,
                other => other,
            }
        })
    }
}

/// Which link a credential opens (and so which audience it must name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Link {
    /// `/v1/client`, and a turn's user credential.
    Client,
    /// `/v1/backend`.
    Backend,
    /// A read of any session for operations (`tether token --aud tether-operator`).
    Operator,
}

impl Link {
    /// The audience the edge's own tokens carry for this link.
    pub const fn own_audience(self) -> &'static str {
        match self {
            Link::Client => tether_contract::AUD_CLIENT,
            Link::Backend => tether_contract::AUD_BACKEND,
            Link::Operator => tether_contract::AUD_OPERATOR,
        }
    }
}

/// Verifies every credential the edge accepts: its own HS256 tokens always,
/// and the identity provider's when one is configured.
#[derive(Debug, Clone)]
pub struct Verifier {
    own: Keys,
    idp: Option<Arc<crate::idp::Idp>>,
    verified: Arc<Mutex<VerifiedMemory>>,
}

/// Credentials that verified, by link and token.
type VerifiedMemory = HashMap<(Link, Box<str>), Verified>;

/// How long a verified credential is trusted without checking its signature
/// again. Bounded well below any token's life: a key the identity provider
/// withdraws stops a credential it signed within this long (a JWT is
/// otherwise valid until `exp`; tether keeps no revocation list).
pub const VERIFIED_TTL: Duration = Duration::from_secs(60);
/// Most verified credentials remembered; past it the memory starts over.
pub const VERIFIED_MEMORY: usize = 4096;

/// A credential that verified, until when it may be trusted again unchecked.
#[derive(Debug, Clone)]
struct Verified {
    claims: Claims,
    until: tokio::time::Instant,
}

impl From<Keys> for Verifier {
    fn from(own: Keys) -> Verifier {
        Verifier::new(own, None)
    }
}

impl Verifier {
    /// A verifier for the edge's own keys and, optionally, an identity provider.
    pub fn new(own: Keys, idp: Option<Arc<crate::idp::Idp>>) -> Verifier {
        Verifier { own, idp, verified: Arc::default() }
    }

    /// [`Verifier::verify`], remembering what verified for [`VERIFIED_TTL`]
    /// (and never past its `exp`): the credential every backend call carries
    /// is checked once a minute, not once per call.
    pub fn verify_remembered(&self, token: &str, link: Link) -> Result<Claims, AuthError> {
        let now = tokio::time::Instant::now();
        let key = (link, Box::<str>::from(token));
        if let Some(hit) = crate::lock(&self.verified).get(&key) {
            if now < hit.until && now_secs() < hit.claims.exp.saturating_add(LEEWAY_SECS) {
                return Ok(hit.claims.clone());
            }
        }
        let claims = self.verify(token, link)?;
        let mut memory = crate::lock(&self.verified);
        if memory.len() >= VERIFIED_MEMORY {
            memory.clear();
        }
        memory.insert(key, Verified { claims: claims.clone(), until: now + VERIFIED_TTL });
        Ok(claims)
    }

    /// The edge's own keys (what `tether token` signs with).
    pub fn own(&self) -> &Keys {
        &self.own
    }

    /// The identity provider's key set, when configured.
    pub fn idp(&self) -> Option<&Arc<crate::idp::Idp>> {
        self.idp.as_ref()
    }

    /// Verifies a token for `link`, dispatching on its header: HMAC to the
    /// edge's own secret, anything asymmetric to the identity provider.
    pub fn verify(&self, token: &str, link: Link) -> Result<Claims, AuthError> {
        // Without a provider every token is the edge's own: no header to dispatch on
        // (this runs on every backend call's user credential).
        // Operators are minted by `tether token` only: an identity provider grants no operator view.
        let idp = match &self.idp {
            Some(idp) if link != Link::Operator => idp,
            _ => return self.own.verify(token, link.own_audience()),
        };
        let header = match jsonwebtoken::decode_header(token) {
            Ok(h) => h,
            Err(_) if is_alg_none(token) => return Err(AuthError::AlgNone),
            Err(_) => return Err(AuthError::Malformed),
        };
        match header.alg {
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => {
                if header.kid.as_deref().is_some_and(|kid| idp.knows(kid)) {
                    return Err(AuthError::KeyConfusion);
                }
                self.own.verify(token, link.own_audience())
            }
            alg => idp.verify(token, header.kid.as_deref(), alg, link),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn b64(bytes: &[u8]) -> String {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
            for i in 0..(chunk.len() + 1) {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        out
    }

    #[test]
    fn every_bad_token_is_refused_with_its_reason() {
        let keys = Keys::from_secret(SECRET).unwrap();
        let other = Keys::from_secret(b"another-secret-another-secret-xx").unwrap();
        let now = now_secs();
        let claims = |exp: u64, nbf: u64, aud: &str| Claims {
            sub: "mira".into(),
            aud: aud.into(),
            exp,
            nbf,
            iat: now,
        };
        let good = keys.issue("mira", "tether-client", Duration::from_secs(60)).unwrap();
        assert_eq!(keys.verify(&good, "tether-client").map(|c| c.sub), Ok("mira".into()));

        let payload = b64(br#"{"sub":"mira","aud":"tether-client","exp":9999999999,"nbf":0}"#);
        let alg_none = format!("{}.{payload}.", b64(br#"{"alg":"none","typ":"JWT"}"#));
        let hs512 = jsonwebtoken::encode(
            &Header::new(Algorithm::HS512),
            &claims(now + 60, now, "tether-client"),
            &EncodingKey::from_secret(SECRET),
        )
        .unwrap();
        let exp_string = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &serde_json::json!({"sub": "mira", "aud": "tether-client", "exp": "tomorrow", "nbf": 0}),
            &EncodingKey::from_secret(SECRET),
        )
        .unwrap();
        let mut parts: Vec<String> = good.split('.').map(str::to_owned).collect();
        parts[1] = b64(br#"{"sub":"leo","aud":"tether-client","exp":9999999999,"nbf":0}"#);
        let tampered = parts.join(".");
        let no_nbf = {
            #[derive(Serialize)]
            struct NoNbf<'a> {
                sub: &'a str,
                aud: &'a str,
                exp: u64,
            }
            jsonwebtoken::encode(
                &Header::new(Algorithm::HS256),
                &NoNbf { sub: "mira", aud: "tether-client", exp: now + 60 },
                &EncodingKey::from_secret(SECRET),
            )
            .unwrap()
        };

        let cases: Vec<(&str, String, AuthError)> = vec![
            ("garbage", "not.a.jwt".into(), AuthError::Malformed),
            // jsonwebtoken has no `none` algorithm at all; the edge names it before refusing it.
            ("alg none", alg_none, AuthError::AlgNone),
            ("other algorithm", hs512, AuthError::WrongAlgorithm),
            (
                "other key",
                other.sign(&claims(now + 60, now, "tether-client")).unwrap(),
                AuthError::BadSignature,
            ),
            (
                "expired",
                keys.sign(&claims(now - 3600, now - 7200, "tether-client")).unwrap(),
                AuthError::Expired,
            ),
            (
                "not yet valid",
                keys.sign(&claims(now + 7200, now + 3600, "tether-client")).unwrap(),
                AuthError::NotYetValid,
            ),
            ("exp as string", exp_string, AuthError::Malformed),
            (
                "wrong audience",
                keys.sign(&claims(now + 60, now, "tether-backend")).unwrap(),
                AuthError::WrongAudience,
            ),
            ("tampered payload", tampered, AuthError::BadSignature),
            ("missing nbf", no_nbf, AuthError::MissingClaim),
        ];
        for (name, token, want) in cases {
            let got = keys.verify(&token, "tether-client");
            assert_eq!(got.err(), Some(want), "{name}");
        }
    }

    #[test]
    fn generated_secret_is_private_and_reused() {
        let dir = std::env::temp_dir().join(format!("tether-auth-{}", uuid::Uuid::new_v4()));
        let (a, src_a) = Keys::load(None, &dir).unwrap();
        assert!(matches!(src_a, SecretSource::Created(_)));
        let (b, src_b) = Keys::load(None, &dir).unwrap();
        assert!(matches!(src_b, SecretSource::File(_)));
        let token = a.issue("mira", "tether-backend", Duration::from_secs(60)).unwrap();
        assert!(
            b.verify(&token, "tether-backend").is_ok(),
            "the reused secret verifies the first one's tokens"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join(SECRET_FILE)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

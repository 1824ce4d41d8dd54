//! Credentials: the edge's own HS256 JWTs and the secret they are signed
//! with, and the [`Verifier`] that also accepts the identity provider's tokens.
//!
//! The edge's own tokens use exactly one algorithm (HS256); `exp`, `nbf`,
//! `aud` and `sub` are required; the audience says which link the token opens.
//! The secret comes from `TETHER_JWT_SECRET`, else configuration, else a
//! random secret generated once into a 0600 file in the data directory, so
//! `tether token` and `tether serve` on one machine agree without any setup.
//! Identity-provider tokens (asymmetric, with a `kid`) go to [`crate::idp`].
//!
//! Here: the claims, the keys and their errors. Where the secret comes from
//! is `auth/secret.rs`; the [`Verifier`] and its memory `auth/verifier.rs`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::errors::ErrorKind as JwtErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

mod secret;
mod verifier;

pub use secret::{SecretError, SecretSource, SECRET_ENV, SECRET_FILE};
pub use verifier::{Link, Verifier, VERIFIED_MEMORY, VERIFIED_TTL};

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

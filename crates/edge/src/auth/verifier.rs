//! The [`Verifier`]: every credential the edge accepts, its own HS256 tokens
//! and the identity provider's, dispatched on the token's header, and a
//! short memory of what verified so a backend's per-call credential is not
//! checked on every call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jsonwebtoken::Algorithm;

use super::{is_alg_none, now_secs, AuthError, Claims, Keys, LEEWAY_SECS};

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

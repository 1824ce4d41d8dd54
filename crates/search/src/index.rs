//! A BM25F index over tool declarations.
//!
//! Each declaration is read into five fields — name, title, description,
//! parameters (names and descriptions) and values (enum members) — each with
//! its own weight and length normalisation (BM25F, Robertson & Zaragoza): a
//! term's field frequencies are normalised by field length, weighted, summed,
//! and only then saturated, so a word in a tool's name counts for more than
//! the same word buried in a parameter's description, and repeating a word
//! across fields does not run away.
//!
//! Each query word is one concept: a tool scores the best of the word
//! itself, the word's thesaurus terms ([`crate::thesaurus`]) taken together
//! as one term at a lower weight, and the declared terms nearest it by word
//! vector ([`crate::semantic`]) taken together at a lower weight still. A
//! tool's score is the sum over the query's words. A declaration that calls
//! itself deprecated is demoted. The top of the ranking is then picked
//! greedily for coverage, so a request for several things finds a tool for
//! each. Ranking is deterministic: equal
//! scores go by name, then by position.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value;
use tether_contract::mcp::ToolDeclaration;
use tether_contract::names::PREFIX;

use crate::tokenize::{kept, stem, words};
use crate::{semantic, thesaurus};

/// How many fields a declaration is read into.
pub const FIELDS: usize = 5;

/// Where in a declaration a term was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// The tool's name, without the `client__` namespace.
    Name = 0,
    /// The display title.
    Title = 1,
    /// The description.
    Description = 2,
    /// Parameter names and their descriptions and titles.
    Parameters = 3,
    /// Enum members of the parameters (units, modes, rooms, programs).
    Values = 4,
}

/// How many candidates per returned tool the diversification considers.
const DIVERSIFY_POOL: usize = 4;

/// Deepest schema nesting read for parameters; deeper schemas add nothing.
const MAX_SCHEMA_DEPTH: usize = 8;

/// The knobs of the ranking; [`Weights::default`] is what `find_tools` uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Weights {
    /// Weight of a term occurrence in each field (indexed by [`Field`]).
    pub field: [f64; FIELDS],
    /// Length normalisation per field: 0 ignores length, 1 normalises fully.
    pub b: [f64; FIELDS],
    /// Term-frequency saturation.
    pub k1: f64,
    /// Weight of a thesaurus term relative to a word the query used.
    pub expansion: f64,
    /// Weight of the word-vector tier relative to a word the query used (0 turns it off).
    pub semantic: f64,
    /// Lowest cosine at which a declared word is a neighbour of a query word.
    pub semantic_min: f32,
    /// Most neighbours a query word reaches through its vector.
    pub semantic_top: usize,
    /// Score multiplier for a tool whose title or description says it is deprecated.
    pub deprecated: f64,
    /// How much a query word already covered by a picked tool counts for the
    /// next pick (0 keeps plain score order; see [`Index::search`]).
    pub novelty: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            field: [2.0, 1.0, 1.0, 0.2, 0.5],
            b: [0.8, 0.5, 0.75, 0.75, 0.75],
            k1: 1.2,
            expansion: 0.9,
            semantic: 0.5,
            semantic_min: 0.5,
            semantic_top: 5,
            deprecated: 0.5,
            novelty: 0.3,
        }
    }
}

/// One ranked tool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// Position of the tool in the slice the index was built from.
    pub index: usize,
    /// Its BM25F score (0 for an empty query).
    pub score: f64,
}

/// One term's occurrences in one declaration, per field.
#[derive(Debug, Clone)]
struct Posting {
    doc: u32,
    tf: [u16; FIELDS],
}

/// A searchable set of tool declarations; build once, query many times.
#[derive(Debug, Clone)]
pub struct Index {
    names: Vec<String>,
    lens: Vec<[u32; FIELDS]>,
    avg: [f64; FIELDS],
    demote: Vec<f64>,
    postings: HashMap<String, Vec<Posting>>,
    /// The indexed terms that have a word vector, and those vectors.
    vectors: TermVectors,
    weights: Weights,
}

impl Index {
    /// Indexes `tools` with the default weights.
    pub fn build(tools: &[ToolDeclaration]) -> Index {
        Index::with_weights(tools, Weights::default())
    }

    /// Indexes `tools` with the given weights.
    pub fn with_weights(tools: &[ToolDeclaration], weights: Weights) -> Index {
        let mut names = Vec::with_capacity(tools.len());
        let mut lens = Vec::with_capacity(tools.len());
        let mut demote = Vec::with_capacity(tools.len());
        let mut postings: HashMap<String, Vec<Posting>> = HashMap::new();
        let mut total = [0u64; FIELDS];
        let mut spellings: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (doc, tool) in tools.iter().enumerate() {
            let fields = read_fields(tool);
            let mut tf: BTreeMap<String, [u16; FIELDS]> = BTreeMap::new();
            let mut len = [0u32; FIELDS];
            for (f, field_words) in fields.into_iter().enumerate() {
                len[f] = u32::try_from(field_words.len()).unwrap_or(u32::MAX);
                total[f] += u64::from(len[f]);
                for word in field_words {
                    let term = stem(&word);
                    if weights.semantic > 0.0 {
                        spellings.entry(term.clone()).or_default().insert(word);
                    }
                    let counts = tf.entry(term).or_insert([0; FIELDS]);
                    counts[f] = counts[f].saturating_add(1);
                }
            }
            let doc = u32::try_from(doc).unwrap_or(u32::MAX);
            for (term, tf) in tf {
                postings.entry(term).or_default().push(Posting { doc, tf });
            }
            names.push(tool.name.clone());
            lens.push(len);
            demote.push(if is_deprecated(tool) { weights.deprecated } else { 1.0 });
        }
        let n = tools.len().max(1) as f64;
        let avg = std::array::from_fn(|f| (total[f] as f64 / n).max(1.0));
        let vectors =
            if weights.semantic > 0.0 { TermVectors::of(spellings) } else { TermVectors::default() };
        Index { names, lens, avg, demote, postings, vectors, weights }
    }

    /// How many tools the index holds.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the index holds no tools.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The best `limit` tools for `query`, best first.
    ///
    /// Only tools that match at least one query term (or a thesaurus term,
    /// or a vector neighbour) are returned. A query with no terms at all lists tools by name.
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        let concepts = concepts(query);
        if concepts.is_empty() {
            let mut all: Vec<usize> = (0..self.len()).collect();
            all.sort_by(|a, b| self.names[*a].cmp(&self.names[*b]).then(a.cmp(b)));
            return all.into_iter().take(limit).map(|index| Hit { index, score: 0.0 }).collect();
        }
        // Each tool's score for each query word.
        let mut per_concept: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        for (c, concept) in concepts.iter().enumerate() {
            for (doc, score) in self.concept_scores(concept) {
                per_concept.entry(doc).or_insert_with(|| vec![0.0; concepts.len()])[c] =
                    score * self.demote[doc];
            }
        }
        let mut ranked: Vec<(Hit, Vec<f64>)> = per_concept
            .into_iter()
            .map(|(index, scores)| (Hit { index, score: scores.iter().sum() }, scores))
            .collect();
        ranked.sort_by(|a, b| self.order(&a.0, &b.0));
        self.diversify(ranked, limit)
    }

    /// Best first; equal scores by name, then by position.
    fn order(&self, a: &Hit, b: &Hit) -> std::cmp::Ordering {
        b.score
            .total_cmp(&a.score)
            .then_with(|| self.names[a.index].cmp(&self.names[b.index]))
            .then(a.index.cmp(&b.index))
    }

    /// Picks `limit` tools from the best-scored candidates, each time the one
    /// that adds most for query words the picked tools do not cover yet
    /// (greedy coverage, as in search-result diversification): a request for
    /// several things ("lock the door, lights off, arm the alarm") gets a
    /// tool for each instead of five for the strongest one. The first pick
    /// is always the best-scored tool; a one-word query keeps score order.
    fn diversify(&self, ranked: Vec<(Hit, Vec<f64>)>, limit: usize) -> Vec<Hit> {
        let novelty = self.weights.novelty;
        let pool = limit.saturating_mul(DIVERSIFY_POOL);
        let (mut candidates, rest): (Vec<_>, Vec<_>) =
            ranked.into_iter().enumerate().partition(|(i, _)| *i < pool);
        let Some(words) = candidates.first().map(|(_, (_, scores))| scores.len()) else { return Vec::new() };
        let best: Vec<f64> =
            (0..words).map(|c| candidates.iter().map(|(_, (_, s))| s[c]).fold(0.0, f64::max)).collect();
        let mut covered = vec![0.0f64; words];
        let mut picked = Vec::with_capacity(limit.min(candidates.len()));
        while picked.len() < limit && !candidates.is_empty() {
            let gain = |scores: &[f64]| -> f64 {
                scores.iter().zip(&covered).map(|(s, cov)| s * (1.0 - novelty * cov)).sum()
            };
            let mut choice = 0;
            for i in 1..candidates.len() {
                if gain(&candidates[i].1 .1) > gain(&candidates[choice].1 .1) {
                    choice = i;
                }
            }
            let (_, (hit, scores)) = candidates.remove(choice);
            for c in 0..words {
                if best[c] > 0.0 {
                    covered[c] = covered[c].max(scores[c] / best[c]);
                }
            }
            picked.push(hit);
        }
        picked.extend(rest.into_iter().map(|(_, (hit, _))| hit).take(limit.saturating_sub(picked.len())));
        picked
    }

    /// Every tool's score for one query word: the best of the word itself,
    /// its thesaurus terms taken together at the expansion weight, and its
    /// vector neighbours taken together at the semantic weight, each
    /// neighbour's frequency scaled by its cosine.
    ///
    /// The thesaurus terms count as one term (their frequencies summed,
    /// their document frequency that of any of them), so a word with many
    /// synonyms cannot outvote the query's other words, and a rare synonym
    /// does not outweigh the word's common meaning.
    fn concept_scores(&self, concept: &Concept) -> BTreeMap<usize, f64> {
        let mut out: BTreeMap<usize, f64> = BTreeMap::new();
        self.each_score(&concept.term, |doc, s| {
            out.insert(doc, s);
        });
        let mut related: BTreeMap<usize, f64> = BTreeMap::new();
        for term in concept.related {
            for posting in self.postings.get(term).map(Vec::as_slice).unwrap_or(&[]) {
                let doc = posting.doc as usize;
                *related.entry(doc).or_default() += self.pseudo_frequency(doc, &posting.tf);
            }
        }
        let idf = self.idf(related.len());
        for (doc, tf) in related {
            let s = self.weights.expansion * idf * tf / (self.weights.k1 + tf);
            let entry = out.entry(doc).or_default();
            *entry = entry.max(s);
        }
        let mut near: BTreeMap<usize, f64> = BTreeMap::new();
        for (term, similarity) in self.neighbours(concept) {
            for posting in self.postings.get(term).map(Vec::as_slice).unwrap_or(&[]) {
                let doc = posting.doc as usize;
                *near.entry(doc).or_default() +=
                    f64::from(similarity) * self.pseudo_frequency(doc, &posting.tf);
            }
        }
        // The neighbours stand in for the word: where the word itself is
        // declared, they are never rarer (more telling) than it is.
        let idf = match self.postings.get(&concept.term) {
            Some(own) => self.idf(near.len()).min(self.idf(own.len())),
            None => self.idf(near.len()),
        };
        for (doc, tf) in near {
            let s = self.weights.semantic * idf * tf / (self.weights.k1 + tf);
            let entry = out.entry(doc).or_default();
            *entry = entry.max(s);
        }
        out
    }

    /// The indexed terms closest to a query word by vector, with their cosines.
    fn neighbours(&self, concept: &Concept) -> Vec<(&str, f32)> {
        let vectors = &self.vectors;
        if vectors.terms.is_empty() {
            return Vec::new();
        }
        let Some(query) = semantic::table().and_then(|t| t.get(&concept.word)) else { return Vec::new() };
        let mut near: Vec<(&str, f32)> = vectors
            .terms
            .iter()
            .zip(vectors.matrix.chunks_exact(query.len()))
            .map(|(term, v)| (term.as_str(), semantic::cosine(&query, v)))
            .filter(|(term, c)| *c >= self.weights.semantic_min && *term != concept.term)
            .collect();
        near.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
        near.truncate(self.weights.semantic_top);
        near
    }

    /// BM25's inverse document frequency for a term held by `df` tools.
    fn idf(&self, df: usize) -> f64 {
        let (n, df) = (self.len() as f64, df as f64);
        (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
    }

    /// Calls `f` with every tool that holds `term` and the term's BM25F score there.
    fn each_score(&self, term: &str, mut f: impl FnMut(usize, f64)) {
        let Some(list) = self.postings.get(term) else { return };
        let idf = self.idf(list.len());
        for posting in list {
            let doc = posting.doc as usize;
            let tf = self.pseudo_frequency(doc, &posting.tf);
            f(doc, idf * tf / (self.weights.k1 + tf));
        }
    }

    /// BM25F's weighted, length-normalised term frequency summed over fields.
    fn pseudo_frequency(&self, doc: usize, tf: &[u16; FIELDS]) -> f64 {
        let w = &self.weights;
        (0..FIELDS)
            .filter(|f| tf[*f] > 0)
            .map(|f| {
                let norm = 1.0 - w.b[f] + w.b[f] * f64::from(self.lens[doc][f]) / self.avg[f];
                w.field[f] * f64::from(tf[f]) / norm
            })
            .sum()
    }
}

/// The word vectors of an index's terms, one row per term, in term order.
#[derive(Debug, Clone, Default)]
struct TermVectors {
    terms: Vec<String>,
    matrix: Vec<f32>,
}

impl TermVectors {
    /// A term's vector is the mean direction of the words stemmed to it
    /// (`light`: "lights", "lighting"); terms with no known word are left out.
    fn of(spellings: BTreeMap<String, BTreeSet<String>>) -> TermVectors {
        let mut out = TermVectors::default();
        let Some(table) = semantic::table() else { return out };
        for (term, words) in spellings {
            if let Some(v) = semantic::centroid(words.iter().filter_map(|w| table.get(w))) {
                out.terms.push(term);
                out.matrix.extend(v);
            }
        }
        out
    }
}

/// Most distinct words of a query that are searched; the rest are ignored.
/// A query is a few words, and each costs a scan of the declared terms' vectors.
pub const MAX_QUERY_WORDS: usize = 32;

/// One word of a query and the thesaurus terms it reaches (its vector
/// neighbours are found against the index, see [`Index::search`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Concept {
    /// The word's stem.
    pub term: String,
    /// Stems the thesaurus relates to it (may be empty).
    pub related: &'static [String],
    /// The word, lowercased, for its vector: as the query wrote it, or the
    /// word a phrasal verb means ("cancel" for "call off").
    pub word: String,
}

/// A query's distinct terms, in order, each with what it reaches; at most
/// [`MAX_QUERY_WORDS`].
pub fn concepts(query: &str) -> Vec<Concept> {
    let mut out: Vec<Concept> = Vec::new();
    for word in kept(thesaurus::phrases(words(query))) {
        if out.len() == MAX_QUERY_WORDS {
            break;
        }
        let term = stem(&word);
        if !out.iter().any(|c| c.term == term) {
            let related = thesaurus::related(&term);
            out.push(Concept { term, related, word });
        }
    }
    out
}

/// The words of each field of a declaration (unstemmed; see [`kept`]).
fn read_fields(tool: &ToolDeclaration) -> [Vec<String>; FIELDS] {
    let name = tool.name.strip_prefix(PREFIX).unwrap_or(&tool.name);
    let mut params = Vec::new();
    let mut values = Vec::new();
    read_schema(&tool.input_schema, &mut params, &mut values, 0);
    // In `Field` order.
    [
        meaningful(name),
        tool.title.as_deref().map(meaningful).unwrap_or_default(),
        tool.description.as_deref().map(meaningful).unwrap_or_default(),
        params,
        values,
    ]
}

/// Collects parameter names, descriptions and titles, and enum members, from
/// a JSON Schema, through nested objects, arrays and combinators.
fn read_schema(schema: &Value, params: &mut Vec<String>, values: &mut Vec<String>, depth: usize) {
    if depth > MAX_SCHEMA_DEPTH {
        return;
    }
    let Some(object) = schema.as_object() else { return };
    if depth > 0 {
        for key in ["description", "title"] {
            if let Some(text) = object.get(key).and_then(Value::as_str) {
                params.extend(meaningful(text));
            }
        }
    }
    if let Some(members) = object.get("enum").and_then(Value::as_array) {
        values.extend(members.iter().filter_map(Value::as_str).flat_map(meaningful));
    }
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        for (key, sub) in properties {
            params.extend(meaningful(key));
            read_schema(sub, params, values, depth + 1);
        }
    }
    match object.get("items") {
        Some(Value::Array(items)) => items.iter().for_each(|s| read_schema(s, params, values, depth + 1)),
        Some(items) => read_schema(items, params, values, depth + 1),
        None => {}
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(subs)) = object.get(key) {
            subs.iter().for_each(|s| read_schema(s, params, values, depth + 1));
        }
    }
}

/// The words of a text that carry meaning, unstemmed.
fn meaningful(text: &str) -> Vec<String> {
    kept(words(text))
}

/// Whether a declaration calls itself deprecated (in its title, description
/// or a `deprecated` annotation).
fn is_deprecated(tool: &ToolDeclaration) -> bool {
    let says =
        |text: &Option<String>| text.as_deref().is_some_and(|t| words(t).iter().any(|w| w == "deprecated"));
    let annotated = tool.annotations.as_ref().and_then(|a| a.get("deprecated")).and_then(Value::as_bool);
    says(&tool.title) || says(&tool.description) || annotated == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, description: &str) -> ToolDeclaration {
        ToolDeclaration {
            name: name.into(),
            title: None,
            description: Some(description.into()),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: None,
            execution: None,
        }
    }

    fn ranked(index: &Index, tools: &[ToolDeclaration], query: &str) -> Vec<String> {
        index.search(query, 10).iter().map(|h| tools[h.index].name.clone()).collect()
    }

    #[test]
    fn equal_scores_rank_by_name_whatever_the_declaration_order() {
        let a =
            [tool("client__b_lamp", "Lamp."), tool("client__a_lamp", "Lamp."), tool("client__c", "Oven.")];
        let b = [a[2].clone(), a[0].clone(), a[1].clone()];
        let want = ["client__a_lamp", "client__b_lamp"];
        assert_eq!(ranked(&Index::build(&a), &a, "lamp"), want);
        assert_eq!(ranked(&Index::build(&b), &b, "lamp"), want);
        let again = Index::build(&a);
        assert_eq!(again.search("lamp", 10), Index::build(&a).search("lamp", 10), "same scores every build");
    }

    #[test]
    fn a_word_in_the_name_outranks_the_same_word_in_a_parameter() {
        let mut in_param = tool("client__set_mode", "Changes how it runs.");
        in_param.input_schema = json!({"type": "object", "properties": {"fan_speed": {"type": "string", "description": "Fan speed of the fan."}}});
        let tools = [in_param, tool("client__set_fan_speed", "Changes how it runs.")];
        assert_eq!(
            ranked(&Index::build(&tools), &tools, "fan speed"),
            ["client__set_fan_speed", "client__set_mode"]
        );
        // With the field weights swapped the parameter wins: the weights are what decide.
        let weights = Weights { field: [0.1, 1.5, 1.0, 3.0, 0.3], ..Weights::default() };
        let swapped = Index::with_weights(&tools, weights);
        assert_eq!(ranked(&swapped, &tools, "fan speed")[0], "client__set_mode");
    }

    #[test]
    fn enum_values_parameter_names_and_titles_are_searched() {
        let mut mode = tool("client__set_mode", "Switches the mode.");
        mode.input_schema = json!({"type": "object", "properties": {
            "program": {"type": "string", "enum": ["eco", "intensive"]},
            "rinse_aid": {"type": "boolean"}
        }});
        let mut titled = tool("client__x1", "Does it.");
        titled.title = Some("Garage door".into());
        let tools = [mode, titled];
        let index = Index::build(&tools);
        assert_eq!(ranked(&index, &tools, "intensive"), ["client__set_mode"]);
        assert_eq!(ranked(&index, &tools, "rinse"), ["client__set_mode"]);
        assert_eq!(ranked(&index, &tools, "garage"), ["client__x1"]);
        assert!(ranked(&index, &tools, "client").is_empty(), "the namespace is not a word of the tool");
    }

    #[test]
    fn stems_meet_and_the_thesaurus_bridges_a_paraphrase() {
        let tools = [
            tool("client__set_temperature", "Sets the target temperature."),
            tool("client__lights_on", "Lights on."),
        ];
        let index = Index::build(&tools);
        assert_eq!(ranked(&index, &tools, "lighting"), ["client__lights_on"]);
        assert_eq!(ranked(&index, &tools, "it's freezing"), ["client__set_temperature"]);
        let plain =
            Index::with_weights(&tools, Weights { expansion: 0.0, semantic: 0.0, ..Weights::default() });
        assert_eq!(plain.search("freezing", 10)[0].score, 0.0, "without expansion nothing matches");
    }

    #[test]
    fn word_vectors_bridge_a_word_no_declaration_and_no_thesaurus_line_holds() {
        let tools =
            [tool("client__call_attorney", "Phones your attorney."), tool("client__play", "Plays music.")];
        let index = Index::build(&tools);
        assert_eq!(ranked(&index, &tools, "lawyer"), ["client__call_attorney"]);
        let plain = Index::with_weights(&tools, Weights { semantic: 0.0, ..Weights::default() });
        assert!(ranked(&plain, &tools, "lawyer").is_empty(), "without vectors nothing matches");
    }

    #[test]
    fn a_vector_neighbour_counts_for_less_than_the_word_itself() {
        // Named so that a tie would put the neighbour first: only the score can.
        let tools = [tool("client__a", "Attorney on retainer."), tool("client__b", "Lawyer on retainer.")];
        let index = Index::build(&tools);
        assert_eq!(ranked(&index, &tools, "lawyer"), ["client__b", "client__a"]);
        let hits = index.search("lawyer", 2);
        assert!(hits[0].score > hits[1].score && hits[1].score > 0.0, "{hits:?}");
    }

    #[test]
    fn a_query_past_its_word_limit_is_searched_for_its_first_words_only() {
        let tools = [tool("client__lamp", "Lamp."), tool("client__oven", "Oven.")];
        let index = Index::build(&tools);
        let filler: Vec<String> = (0..MAX_QUERY_WORDS - 1).map(|i| format!("zq{i}")).collect();
        let within = format!("{} lamp oven", filler.join(" "));
        assert_eq!(concepts(&within).len(), MAX_QUERY_WORDS);
        assert_eq!(ranked(&index, &tools, &within), ["client__lamp"], "the 33rd word is not searched");
    }

    #[test]
    fn a_synonym_counts_once_per_query_word() {
        // "warm" reaches "heat", "heater", "heating", "temperature",
        // "setpoint" and "hot": a tool stuffed with all of them must not
        // outscore the one that holds both words of the query.
        let tools = [
            tool("client__a", "Keeps the room warm."),
            tool("client__b", "Heat heater heating temperature setpoint hot."),
        ];
        let index = Index::build(&tools);
        assert_eq!(ranked(&index, &tools, "warm room"), ["client__a", "client__b"]);
    }

    #[test]
    fn a_phrasal_verb_reads_as_its_meaning() {
        let tools =
            [tool("client__cancel_order", "Cancels an order."), tool("client__call", "Phones someone.")];
        let index = Index::build(&tools);
        assert_eq!(ranked(&index, &tools, "call off my order")[0], "client__cancel_order");
        assert_eq!(ranked(&index, &tools, "call my mum")[0], "client__call");
    }

    #[test]
    fn on_and_off_tell_twins_apart() {
        let tools =
            [tool("client__turn_off_lights", "Lights off."), tool("client__turn_on_lights", "Lights on.")];
        let index = Index::build(&tools);
        assert_eq!(ranked(&index, &tools, "turn on the lights")[0], "client__turn_on_lights");
        assert_eq!(ranked(&index, &tools, "lights off")[0], "client__turn_off_lights");
    }

    #[test]
    fn a_request_for_several_things_finds_a_tool_for_each() {
        let tools = [
            tool("client__arm_alarm", "Arms the alarm."),
            tool("client__disarm_alarm", "Disarms the alarm."),
            tool("client__alarm_log", "The alarm log: every alarm."),
            tool("client__arm_alarm_at_night", "Arms the alarm at night."),
            tool("client__lock", "Locks a door."),
            tool("client__oven", "Heats the oven."),
        ];
        let query = "arm the alarm and lock up";
        let top = |index: &Index| ranked(index, &tools, query)[..2].to_vec();
        assert_eq!(top(&Index::build(&tools)), ["client__arm_alarm", "client__lock"]);
        let plain = Index::with_weights(&tools, Weights { novelty: 0.0, ..Weights::default() });
        assert!(!top(&plain).contains(&"client__lock".to_owned()), "without it, alarms crowd the top");
    }

    #[test]
    fn deprecated_tools_rank_below_their_replacement() {
        let tools = [
            tool("client__print_label", "Deprecated: prints a label."),
            tool("client__print_label_v2", "Prints a label on a sheet of labels, one by one."),
        ];
        assert_eq!(ranked(&Index::build(&tools), &tools, "print label")[0], "client__print_label_v2");
    }

    #[test]
    fn an_empty_query_lists_tools_by_name() {
        let tools = [tool("client__b", "B."), tool("client__a", "A.")];
        let index = Index::build(&tools);
        assert_eq!(ranked(&index, &tools, "  the  "), ["client__a", "client__b"]);
        assert!(Index::build(&[]).search("anything", 8).is_empty());
    }
}

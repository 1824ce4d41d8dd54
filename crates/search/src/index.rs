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
//! Query terms are expanded through the thesaurus ([`crate::thesaurus`]) at a
//! lower weight. A declaration that calls itself deprecated is demoted.
//! Ranking is deterministic: equal scores go by name, then by position.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;
use tether_contract::mcp::ToolDeclaration;
use tether_contract::names::PREFIX;

use crate::thesaurus;
use crate::tokenize::{terms, words};

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
    /// Score multiplier for a tool whose title or description says it is deprecated.
    pub deprecated: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            field: [3.0, 1.5, 1.0, 0.4, 0.3],
            b: [0.5, 0.5, 0.75, 0.75, 0.75],
            k1: 1.2,
            expansion: 0.8,
            deprecated: 0.5,
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
        for (doc, tool) in tools.iter().enumerate() {
            let fields = read_fields(tool);
            let mut tf: BTreeMap<&str, [u16; FIELDS]> = BTreeMap::new();
            let mut len = [0u32; FIELDS];
            for (f, field_terms) in fields.iter().enumerate() {
                len[f] = u32::try_from(field_terms.len()).unwrap_or(u32::MAX);
                total[f] += u64::from(len[f]);
                for term in field_terms {
                    let counts = tf.entry(term.as_str()).or_insert([0; FIELDS]);
                    counts[f] = counts[f].saturating_add(1);
                }
            }
            let doc = u32::try_from(doc).unwrap_or(u32::MAX);
            for (term, tf) in tf {
                postings.entry(term.to_owned()).or_default().push(Posting { doc, tf });
            }
            names.push(tool.name.clone());
            lens.push(len);
            demote.push(if is_deprecated(tool) { weights.deprecated } else { 1.0 });
        }
        let n = tools.len().max(1) as f64;
        let avg = std::array::from_fn(|f| (total[f] as f64 / n).max(1.0));
        Index { names, lens, avg, demote, postings, weights }
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
    /// Only tools that match at least one query term (or a thesaurus term)
    /// are returned. A query with no terms at all lists tools by name.
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        let concepts = concepts(query);
        if concepts.is_empty() {
            let mut all: Vec<usize> = (0..self.len()).collect();
            all.sort_by(|a, b| self.names[*a].cmp(&self.names[*b]).then(a.cmp(b)));
            return all.into_iter().take(limit).map(|index| Hit { index, score: 0.0 }).collect();
        }
        // Each query word is one concept: a tool scores the word itself or,
        // if better, its best thesaurus term at the expansion weight, never
        // both, so a word with many synonyms cannot outvote the other words.
        let mut scores = vec![0.0f64; self.len()];
        let mut touched = vec![false; self.len()];
        let mut concept_score = vec![0.0f64; self.len()];
        let mut reached: Vec<usize> = Vec::new();
        for concept in &concepts {
            self.each_score(&concept.term, |doc, s| {
                concept_score[doc] = s;
                reached.push(doc);
            });
            for related in concept.related {
                self.each_score(related, |doc, s| {
                    concept_score[doc] = concept_score[doc].max(self.weights.expansion * s);
                    reached.push(doc);
                });
            }
            for &doc in &reached {
                scores[doc] += std::mem::take(&mut concept_score[doc]);
                touched[doc] = true;
            }
            reached.clear();
        }
        let mut hits: Vec<Hit> = (0..self.len())
            .filter(|d| touched[*d])
            .map(|index| Hit { index, score: scores[index] * self.demote[index] })
            .collect();
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| self.names[a.index].cmp(&self.names[b.index]))
                .then(a.index.cmp(&b.index))
        });
        hits.truncate(limit);
        hits
    }

    /// Calls `f` with every tool that holds `term` and the term's BM25F score there.
    fn each_score(&self, term: &str, mut f: impl FnMut(usize, f64)) {
        let Some(list) = self.postings.get(term) else { return };
        let n = self.len() as f64;
        let df = list.len() as f64;
        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
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

/// One word of a query and the thesaurus terms it reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Concept {
    /// The word's stem.
    pub term: String,
    /// Stems the thesaurus relates to it (may be empty).
    pub related: &'static [String],
}

/// A query's distinct terms, in order, each with what it reaches.
pub fn concepts(query: &str) -> Vec<Concept> {
    let mut out: Vec<Concept> = Vec::new();
    for term in terms(query) {
        if !out.iter().any(|c| c.term == term) {
            let related = thesaurus::related(&term);
            out.push(Concept { term, related });
        }
    }
    out
}

/// The terms of each field of a declaration.
fn read_fields(tool: &ToolDeclaration) -> [Vec<String>; FIELDS] {
    let name = tool.name.strip_prefix(PREFIX).unwrap_or(&tool.name);
    let mut params = Vec::new();
    let mut values = Vec::new();
    read_schema(&tool.input_schema, &mut params, &mut values, 0);
    // In `Field` order.
    [
        terms(name),
        tool.title.as_deref().map(terms).unwrap_or_default(),
        tool.description.as_deref().map(terms).unwrap_or_default(),
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
                params.extend(terms(text));
            }
        }
    }
    if let Some(members) = object.get("enum").and_then(Value::as_array) {
        values.extend(members.iter().filter_map(Value::as_str).flat_map(terms));
    }
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        for (key, sub) in properties {
            params.extend(terms(key));
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
        let plain = Index::with_weights(&tools, Weights { expansion: 0.0, ..Weights::default() });
        assert_eq!(plain.search("freezing", 10)[0].score, 0.0, "without expansion nothing matches");
    }

    #[test]
    fn a_synonym_counts_once_per_query_word() {
        // "warm" reaches "heat", "temperature", "setpoint" and "hot": a tool
        // holding all four must not outscore the one holding "warm" itself.
        let tools =
            [tool("client__a", "Keeps it warm."), tool("client__b", "Heat temperature setpoint hot.")];
        let index = Index::build(&tools);
        assert_eq!(ranked(&index, &tools, "warm"), ["client__a", "client__b"]);
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

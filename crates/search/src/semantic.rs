//! Word vectors: a bridge for the paraphrases no thesaurus line holds.
//!
//! A query word is compared with every word the declarations use by the
//! cosine of their GloVe vectors (Pennington, Socher & Manning, 2014; public
//! domain), and reaches the closest ones as a weaker expansion tier (see
//! [`crate::Weights::semantic`]): "lawyer" reaches "attorney", "chilly"
//! reaches "cold". The table is embedded (`data/glove-20k-50d.tvec`, 1.1 MB;
//! `data/README.md` says where it comes from), so the search still needs no
//! file, network or model at run time.

use std::collections::HashMap;
use std::sync::OnceLock;

/// The embedded table.
const TABLE: &[u8] = include_bytes!("../data/glove-20k-50d.tvec");

/// A quantised component times this is the component of a unit vector.
const SCALE: f32 = 127.0;

/// A word-vector table: words and their unit vectors, quantised to bytes.
#[derive(Debug)]
pub struct Vectors {
    dims: usize,
    rows: HashMap<&'static str, usize>,
    data: &'static [u8],
}

impl Vectors {
    /// Reads a table: `TVEC`, u32 count, u16 dims (little-endian), then
    /// `count` words as (u8 length, bytes), then `count * dims` signed bytes.
    /// None when the bytes are not such a table.
    pub fn parse(bytes: &'static [u8]) -> Option<Vectors> {
        let rest = bytes.strip_prefix(b"TVEC")?;
        let count = usize::try_from(u32::from_le_bytes(rest.get(..4)?.try_into().ok()?)).ok()?;
        let dims = usize::from(u16::from_le_bytes(rest.get(4..6)?.try_into().ok()?));
        let mut at = 6;
        // Each word takes at least a byte: a header claiming more is refused
        // below without first reserving room for it.
        let mut rows = HashMap::with_capacity(count.min(rest.len()));
        for row in 0..count {
            let len = usize::from(*rest.get(at)?);
            let word = std::str::from_utf8(rest.get(at + 1..at + 1 + len)?).ok()?;
            rows.insert(word, row);
            at += 1 + len;
        }
        let data = rest.get(at..)?;
        (dims > 0 && data.len() == count.checked_mul(dims)?).then_some(Vectors { dims, rows, data })
    }

    /// The vector of a lowercase word, if the table holds it: unit length
    /// to within the bytes' rounding (about 1%).
    pub fn get(&self, word: &str) -> Option<Vec<f32>> {
        let row = *self.rows.get(word)?;
        let bytes = &self.data[row * self.dims..(row + 1) * self.dims];
        Some(bytes.iter().map(|b| f32::from(i8::from_le_bytes([*b])) / SCALE).collect())
    }

    /// How many components each vector has.
    pub fn dims(&self) -> usize {
        self.dims
    }
}

/// The embedded table, read once.
pub fn table() -> Option<&'static Vectors> {
    static VECTORS: OnceLock<Option<Vectors>> = OnceLock::new();
    VECTORS.get_or_init(|| Vectors::parse(TABLE)).as_ref()
}

/// The mean direction of some unit vectors, as a unit vector (None when
/// there are none, or they cancel out).
pub fn centroid(vectors: impl IntoIterator<Item = Vec<f32>>) -> Option<Vec<f32>> {
    let mut vectors = vectors.into_iter();
    let mut sum = vectors.next()?;
    for v in vectors {
        sum.iter_mut().zip(&v).for_each(|(a, b)| *a += b);
    }
    let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm <= f32::EPSILON {
        return None;
    }
    sum.iter_mut().for_each(|x| *x /= norm);
    Some(sum)
}

/// The cosine of two unit vectors (their dot product; the table's rounding
/// moves it by about 1%).
///
/// Summed in eight lanes so the compiler can vectorise it (a plain float
/// sum must keep its order); the search runs it once per declared term for
/// every query word.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let mut lanes = [0.0f32; LANES];
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = a_chunks.remainder().iter().zip(b_chunks.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for i in 0..LANES {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_table_reads_and_relates_what_people_say_to_what_tools_say() {
        let table = table().expect("the embedded table parses");
        assert_eq!(table.dims(), 50);
        let near = |a: &str, b: &str| cosine(&table.get(a).unwrap(), &table.get(b).unwrap());
        assert!(near("car", "vehicle") > 0.6, "car~vehicle {}", near("car", "vehicle"));
        assert!(near("lawyer", "attorney") > 0.6 && near("lawyer", "music") < 0.2);
        assert!((near("oven", "oven") - 1.0).abs() < 0.02, "unit vectors");
        assert!(table.get("zzzzqx").is_none());
    }

    #[test]
    fn a_cut_or_padded_table_is_refused() {
        let cut: &'static [u8] = &TABLE[..TABLE.len() - 1];
        assert!(Vectors::parse(cut).is_none());
        let padded: &'static [u8] = Box::leak([TABLE, &[0]].concat().into_boxed_slice());
        assert!(Vectors::parse(padded).is_none());
        assert!(Vectors::parse(b"TVEC").is_none());
        assert!(Vectors::parse(b"NOPE\x01\x00\x00\x00\x01\x00\x01a\x7f").is_none());
        assert!(Vectors::parse(b"TVEC\x01\x00\x00\x00\x01\x00\x01a\x7f").is_some());
        assert!(Vectors::parse(b"TVEC\xff\xff\xff\xff\x01\x00\x01a\x7f").is_none(), "a huge count");
    }
}

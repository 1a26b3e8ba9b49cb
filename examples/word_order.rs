//! Why a Transformer needs positional encodings: self-attention alone cannot see word order.
//!
//! A tiny single-head self-attention (d = 8, fixed pseudo-random weights) reads "dog bites
//! man" and "man bites dog". Without positional encodings each word's output is the same
//! vector in both sentences, only in another place: attention treats a sentence as a bag of
//! words. Adding `PE(position)` (from `posenc::cpu::table`) to each embedding makes the
//! outputs differ. The numbers are printed; the run fails if either claim does not hold.
//!
//! ```sh
//! cargo run --release --example word_order
//! ```

use ndarray::{Array1, Array2, Axis, s};
use posenc::{PeSpec, cpu};

/// Model dimension: small enough to print a whole vector on one line.
const D: usize = 8;
/// The vocabulary, one embedding row each.
const WORDS: [&str; 3] = ["dog", "bites", "man"];
/// Larger than float64 rounding in a 3-token attention, far smaller than any real difference.
const SAME: f64 = 1e-12;
/// A difference anyone would see in the printed numbers (4 decimals).
const DIFFERENT: f64 = 1e-3;

/// Fixed pseudo-random numbers in [-1, 1) (xorshift64*), so every run prints the same.
struct Numbers(u64);

impl Numbers {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
        bits as f64 / (1u64 << 52) as f64 - 1.0
    }

    fn matrix(&mut self, rows: usize, cols: usize, scale: f64) -> Array2<f64> {
        Array2::from_shape_simple_fn((rows, cols), || scale * self.next())
    }
}

/// One attention head: projections for queries, keys and values.
struct Head {
    wq: Array2<f64>,
    wk: Array2<f64>,
    wv: Array2<f64>,
}

impl Head {
    /// `softmax(Q K^T / sqrt(d)) V` for the token vectors `x`, one row per token.
    fn attend(&self, x: &Array2<f64>) -> Array2<f64> {
        let (q, k, v) = (x.dot(&self.wq), x.dot(&self.wk), x.dot(&self.wv));
        let mut scores = q.dot(&k.t()) / (D as f64).sqrt();
        for mut row in scores.rows_mut() {
            let max = row.fold(f64::NEG_INFINITY, |m, &s| m.max(s));
            row.mapv_inplace(|s| (s - max).exp());
            let total = row.sum();
            row /= total;
        }
        scores.dot(&v)
    }
}

fn print_outputs(sentence: &[usize], out: &Array2<f64>) {
    let text: Vec<&str> = sentence.iter().map(|&w| WORDS[w]).collect();
    println!("  \"{}\"", text.join(" "));
    for (&w, row) in sentence.iter().zip(out.rows()) {
        let values: Vec<String> = row.iter().map(|v| format!("{v:7.4}")).collect();
        println!("    {:<6}[{}]", WORDS[w], values.join(" "));
    }
}

/// The largest difference between a word's output in the two sentences.
fn max_word_difference(a: (&[usize], &Array2<f64>), b: (&[usize], &Array2<f64>)) -> f64 {
    let mut worst = 0.0f64;
    for (i, &word) in a.0.iter().enumerate() {
        let j = b.0.iter().position(|&w| w == word).expect("the same words");
        let diff = &a.1.row(i) - &b.1.row(j);
        worst = worst.max(diff.fold(0.0, |m, d| m.max(d.abs())));
    }
    worst
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut numbers = Numbers(0x5eed_1234_abcd_0042);
    let embeddings = numbers.matrix(WORDS.len(), D, 1.0);
    // Small weights keep the softmax soft, so every token attends to every other.
    let head = Head {
        wq: numbers.matrix(D, D, 0.5),
        wk: numbers.matrix(D, D, 0.5),
        wv: numbers.matrix(D, D, 0.5),
    };
    let dog_bites_man = [0, 1, 2];
    let man_bites_dog = [2, 1, 0];

    let pe = cpu::table(&PeSpec::new(D as u32)?, &[0, 1, 2]).mapv(f64::from);
    println!("Single-head self-attention, d = {D}, over two sentences with the same words.");
    println!("PE rows for positions 0, 1, 2 (posenc::cpu::table):");
    for (p, row) in pe.axis_iter(Axis(0)).enumerate() {
        let values: Vec<String> = row.iter().map(|v| format!("{v:7.4}")).collect();
        println!("    {p:<6}[{}]", values.join(" "));
    }

    let mut differences = Vec::new();
    for (with_pe, heading) in [
        (false, "Without positional encoding: input = embedding"),
        (true, "With positional encoding: input = embedding + PE(position)"),
    ] {
        println!("\n{heading}; attention output per token:");
        let mut outputs = Vec::new();
        for sentence in [&dog_bites_man[..], &man_bites_dog[..]] {
            let mut x = Array2::<f64>::zeros((sentence.len(), D));
            for (t, &w) in sentence.iter().enumerate() {
                let input: Array1<f64> = if with_pe {
                    &embeddings.row(w) + &pe.slice(s![t, ..])
                } else {
                    embeddings.row(w).to_owned()
                };
                x.row_mut(t).assign(&input);
            }
            let out = head.attend(&x);
            print_outputs(sentence, &out);
            outputs.push(out);
        }
        let diff =
            max_word_difference((&dog_bites_man, &outputs[0]), (&man_bites_dog, &outputs[1]));
        println!("  largest difference between a word's outputs in the two sentences: {diff:.1e}");
        differences.push(diff);
    }

    let (without, with) = (differences[0], differences[1]);
    println!();
    if without <= SAME {
        println!(
            "Without PE the outputs are the same vectors, permuted (to float64 rounding, \
             {without:.0e}): word order is invisible."
        );
    } else {
        return Err(
            format!("without PE the outputs should match, but differ by {without:e}").into()
        );
    }
    if with > DIFFERENT {
        println!("With PE \"dog bites man\" and \"man bites dog\" give different outputs.");
    } else {
        return Err(format!("with PE the outputs should differ, but differ by {with:e}").into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn runs_and_its_claims_hold() {
        super::main().unwrap();
    }
}

//! The board's files read back with the framing's own reader (the real `tensorboard` package
//! reads them in tests/it/tensorboard.rs).
//!
//! Must not: need MPI or Python (one process, files in a temporary folder).

use super::*;

fn metrics(epoch: usize) -> EpochMetrics {
    EpochMetrics {
        epoch,
        train_loss: 1.0 / epoch as f64,
        train_accuracy: Some(0.5 + 0.1 * epoch as f64),
        test_loss: Some(2.0 / epoch as f64),
        test_auc: Some(0.5 + 0.125 * epoch as f64),
        samples_per_sec: 1000.0 * epoch as f64,
        epoch_seconds: 1.5,
        exposed_comm_ms_per_step: 0.25,
        steps: 10,
        samples: 100,
        ranks: 2,
        lr: 0.05,
        ..Default::default()
    }
}

/// Every (run, tag, step, value) in the board's folder.
fn read(out: &Path) -> Vec<(String, String, i64, f32)> {
    let mut got = Vec::new();
    for run in RUNS {
        let Ok(entries) = std::fs::read_dir(out.join("tensorboard").join(run)) else { continue };
        for e in entries {
            let bytes = std::fs::read(e.unwrap().path()).unwrap();
            for r in record::records(&bytes) {
                let ev = Event::decode(r).unwrap();
                if let Some(What::Summary(s)) = ev.what {
                    for v in s.value {
                        if let Some(Val::SimpleValue(x)) = v.value {
                            got.push((run.to_string(), v.tag, ev.step, x));
                        }
                    }
                }
            }
        }
    }
    got.sort_by(|a, b| (&a.0, &a.1, a.2).cmp(&(&b.0, &b.1, b.2)));
    got
}

fn steps(got: &[(String, String, i64, f32)], run: &str, tag: &str) -> Vec<(i64, f32)> {
    got.iter().filter(|g| g.0 == run && g.1 == tag).map(|g| (g.2, g.3)).collect()
}

/// Keras' runs and tags with the epochs' values; a run resumed from epoch 2's checkpoint after
/// epoch 3 was logged logs epoch 3 again and the curves hold each epoch (and each step's
/// scalars) once, with the resumed run's values; a fresh start (epoch 1) drops the old curves.
#[test]
fn epochs_are_written_and_a_resume_continues_the_curves_without_duplicates() {
    let out = std::env::temp_dir().join(format!("hv-tb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let mut b = Board::open(&out, 1, 0, "[model]\nlayers = [2, 3]").unwrap();
    for e in 1..=3 {
        // 10 steps an epoch, steps' scalars every 5.
        b.steps(10 * e as u64 - 5, 0.1 * e as f64, 100.0, 0.05).unwrap();
        b.steps(10 * e as u64, 0.1 * e as f64, 100.0, 0.05).unwrap();
        b.epoch(&metrics(e), Some(100.0)).unwrap();
    }
    drop(b);
    let got = read(&out);
    assert_eq!(steps(&got, "train", "epoch_loss"), vec![(1, 1.0), (2, 0.5), (3, 1.0 / 3.0)]);
    assert_eq!(steps(&got, "train", "epoch_accuracy"), vec![(1, 0.6), (2, 0.7), (3, 0.8)]);
    assert_eq!(steps(&got, "train", "epoch_learning_rate"), vec![(1, 0.05), (2, 0.05), (3, 0.05)]);
    assert_eq!(steps(&got, "train", "epoch_samples_per_sec")[2], (3, 3000.0));
    assert_eq!(steps(&got, "train", "epoch_peak_rss_mib").len(), 3);
    assert_eq!(steps(&got, "test", "epoch_loss"), vec![(1, 2.0), (2, 1.0), (3, 2.0 / 3.0)]);
    assert_eq!(steps(&got, "test", "epoch_auc"), vec![(1, 0.625), (2, 0.75), (3, 0.875)]);
    assert!(steps(&got, "validation", "epoch_loss").is_empty(), "no validation data, no validation run");
    assert!(!out.join("tensorboard/validation").exists());

    // Resumed from epoch 2's checkpoint: epoch 3 again, with other values.
    std::thread::sleep(std::time::Duration::from_millis(5));
    let mut b = Board::open(&out, 3, 20, "[model]\nlayers = [2, 3]").unwrap();
    let mut again = metrics(3);
    again.train_loss = 0.3;
    b.steps(25, 0.9, 100.0, 0.05).unwrap();
    b.steps(30, 0.9, 100.0, 0.05).unwrap();
    b.epoch(&again, None).unwrap();
    b.epoch(&metrics(4), None).unwrap();
    drop(b);
    let got = read(&out);
    assert_eq!(steps(&got, "train", "epoch_loss"), vec![(1, 1.0), (2, 0.5), (3, 0.3), (4, 0.25)]);
    assert_eq!(steps(&got, "test", "epoch_loss").len(), 4);
    let batch: Vec<i64> = steps(&got, "train", "batch_loss").iter().map(|s| s.0).collect();
    assert_eq!(batch, vec![5, 10, 15, 20, 25, 30], "the steps' scalars after step 20 were dropped and logged again");
    assert_eq!(steps(&got, "train", "batch_loss")[4].1, 0.9);
    let files = std::fs::read_dir(out.join("tensorboard/train")).unwrap().count();
    assert_eq!(files, 1, "the old file's events were carried into the new one");

    // A fresh start drops the old curves.
    let b = Board::open(&out, 1, 0, "").unwrap();
    drop(b);
    assert!(read(&out).is_empty());
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn a_histogram_counts_each_value_once_in_equal_buckets_from_least_to_largest() {
    let h = super::histogram(&[0.0, 1.0, 1.5, 3.0, f32::NAN], 3);
    assert_eq!((h.min, h.max, h.num, h.sum, h.sum_squares), (0.0, 3.0, 4.0, 5.5, 12.25));
    assert_eq!(h.bucket_limit, vec![1.0, 2.0, 3.0]);
    // 1.0 is the second bucket's left edge: buckets hold [left, right), the last one [left, max].
    assert_eq!(h.bucket, vec![1.0, 2.0, 1.0]);
    let same = super::histogram(&[2.0; 5], 30);
    assert_eq!((same.bucket_limit, same.bucket), (vec![2.0], vec![5.0]));
    let none = super::histogram(&[f32::INFINITY], 30);
    assert_eq!(none.num, 0.0);
}

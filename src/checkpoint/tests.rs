//! Checkpoint files: round trip, keep-K within the live lineage, damage, older formats.
//!
//! Must not: use files outside a fresh temporary directory.
use super::*;
use crate::config::{Activation, LossKind};

const RUN_A: Lineage = Lineage { run_id: 11, parent_run: 0, parent_step: -1 };

fn sample(model: &Mlp, step: u64) -> Checkpoint {
    sample_of(model, step, RUN_A, step as i64)
}

fn sample_of(model: &Mlp, step: u64, lineage: Lineage, written_at: i64) -> Checkpoint {
    let params = model.init_params(step);
    Checkpoint {
        step,
        epoch: 2,
        step_in_epoch: 7,
        world_size: 3,
        global_batch: 12,
        loss_sums: vec![1.5, 2.5, 3.5],
        train_sums: (0..12).map(|i| i as f64 * 0.25).collect(),
        loss_sums_exact: step.is_multiple_of(2),
        m: params.iter().map(|p| p * 0.5).collect(),
        v: model.pad(&vec![0.25; model.n_logical()]).unwrap(),
        // A moving average (optimizer.ema) in some (steps 10, 30, 50, ...), none in others.
        ema: if step % 20 == 10 { params.iter().map(|p| p * 0.75).collect() } else { Vec::new() },
        params,
        job_json: "{\"a\":1}".into(),
        trainer_json: "{\"plateau\":[0.1,0.5,2.0]}".into(),
        norm: crate::data::norm::Norm {
            x_kind: crate::config::Normalize::Standard,
            x_shift: (0..model.n_inputs()).map(|i| i as f64 * 0.5).collect(),
            x_div: vec![3.0; model.n_inputs()],
            ..Default::default()
        },
        names: crate::weights::Names {
            class_names: (0..model.n_outputs()).map(|c| format!("class {c}")).collect(),
            x_columns: Vec::new(),
            y_columns: vec!["unused".into()],
        },
        lineage,
        written_at,
        parts: None,
        unread: None,
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hvtrain-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn model() -> Mlp {
    Mlp::new(&[4, 5, 3], Activation::Tanh, LossKind::SoftmaxCrossEntropy)
}

fn truncate(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn round_trip_keep_and_damage() {
    let dir = scratch("ckpt");
    let model = model();
    for step in [10, 20, 30, 40] {
        save(&dir, &model, &sample(&model, step), 3, || {}).unwrap();
    }
    let steps: Vec<u64> = list(&dir).iter().map(|e| e.0).collect();
    assert_eq!(steps, vec![40, 30, 20], "keeps the newest 3");
    assert_eq!(load(&dir.join(file_name(30)), &model).unwrap(), sample(&model, 30));
    // The arena's padding is not stored: the moments are the parameters' count long.
    let f = hdf5::File::open(dir.join(file_name(30))).unwrap();
    assert!(model.n_params > model.n_logical(), "the test model's arena has padding");
    assert_eq!(f.dataset("optimizer/v").unwrap().shape(), vec![model.n_logical()]);
    drop(f);
    // Damage the newest: the one before it is chosen, with a warning.
    truncate(&dir.join(file_name(40)));
    let (path, c) = newest_valid(&dir, &model).unwrap().unwrap();
    assert_eq!((path, c.step), (dir.join(file_name(30)), 30));
    // Another model's checkpoint is refused, naming the field.
    let other = Mlp::new(&[4, 6, 3], Activation::Tanh, LossKind::SoftmaxCrossEntropy);
    let e = load(&dir.join(file_name(30)), &other).unwrap_err();
    assert!(matches!(e, Error::Checkpoint { kind: CheckpointKind::OtherModel, .. }), "{e:?}");
    let e = e.to_string();
    assert!(e.contains(": layers:") && e.contains(&file_name(30)), "{e}");
    assert!(matches!(newest_valid(&dir, &other), Err(Error::Checkpoint { kind: CheckpointKind::OtherModel, .. })));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Damage is told from another model by the error's type, not its text: a damaged file
/// whose path (or message) mentions "layers" is still skipped.
#[test]
fn damage_is_skipped_whatever_the_path_says() {
    let dir = scratch("layers-ckpt");
    let model = model();
    for step in [10, 20] {
        save(&dir, &model, &sample(&model, step), 3, || {}).unwrap();
    }
    truncate(&dir.join(file_name(20)));
    let e = load(&dir.join(file_name(20)), &model).unwrap_err();
    assert!(matches!(e, Error::Checkpoint { kind: CheckpointKind::Damaged, .. }), "{e:?}");
    let (path, _) = newest_valid(&dir, &model).unwrap().expect("the older one");
    assert_eq!(path, dir.join(file_name(10)));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Run A writes steps 100..500 (keep 3); run B resumes from A's step 300 and writes 350,
/// 360, 370. Auto picks B's newest, keep-K counts B's lineage only and leaves A's
/// abandoned 400 and 500 alone.
#[test]
fn lineage_decides_auto_and_keep() {
    let dir = scratch("ckpt-lineage");
    let model = model();
    for step in [100, 200, 300, 400, 500] {
        save(&dir, &model, &sample(&model, step), 3, || {}).unwrap();
    }
    let from = load(&dir.join(file_name(300)), &model).unwrap();
    let run_b = Lineage::new_run(Some(&from));
    assert_eq!((run_b.parent_run, run_b.parent_step), (RUN_A.run_id, 300));
    assert_ne!(run_b.run_id, RUN_A.run_id);
    save(&dir, &model, &sample_of(&model, 350, run_b, 1000), 3, || {}).unwrap();
    let (path, c) = newest_valid(&dir, &model).unwrap().unwrap();
    assert_eq!((path, c.lineage), (dir.join(file_name(350)), run_b), "auto takes the live run's newest");
    let steps = |d: &Path| list(d).iter().map(|e| e.0).collect::<Vec<_>>();
    assert_eq!(steps(&dir), vec![500, 400, 350, 300], "B's parent is kept");
    for (i, step) in [360, 370].into_iter().enumerate() {
        save(&dir, &model, &sample_of(&model, step, run_b, 1001 + i as i64), 3, || {}).unwrap();
    }
    assert_eq!(steps(&dir), vec![500, 400, 370, 360, 350], "keep 3 of B's lineage; A's branch untouched");
    assert_eq!(newest_valid(&dir, &model).unwrap().unwrap().1.step, 370);
    assert_eq!(abandoned_newer(&dir, run_b), vec![dir.join(file_name(400)), dir.join(file_name(500))]);
    // B's newest damaged: B's previous one, not A's newer-step files.
    truncate(&dir.join(file_name(370)));
    assert_eq!(newest_valid(&dir, &model).unwrap().unwrap().1.step, 360);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A format-2 file (before `global_batch`) still loads and verifies, with global_batch 0
/// for the caller to derive (training.batch_size × world_size).
#[test]
fn format_2_loads_without_global_batch() {
    let dir = scratch("ckpt-format2");
    let model = model();
    let c = sample(&model, 10);
    let path = save(&dir, &model, &c, 3, || {}).unwrap();
    {
        let f = hdf5::File::open_rw(&path).unwrap();
        f.dataset("format").unwrap().write_raw(&[2i64]).unwrap();
        f.unlink("global_batch").unwrap();
        f.dataset("checksum").unwrap().write_raw(&[c.checksum(&model, 2)]).unwrap();
    }
    let read = load(&path, &model).unwrap();
    assert_eq!(read, Checkpoint { global_batch: 0, trainer_json: "{}".into(), train_sums: Vec::new(), ..c });
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A format-3 file (before `trainer_json`) loads with the empty trainer state; a changed
/// trainer state in a format-4 file fails its checksum.
#[test]
fn format_3_loads_without_trainer_state_and_the_state_is_checksummed() {
    let dir = scratch("ckpt-format3");
    let model = model();
    let c = sample(&model, 10);
    let path = save(&dir, &model, &c, 3, || {}).unwrap();
    assert_eq!(load(&path, &model).unwrap(), c);
    {
        let f = hdf5::File::open_rw(&path).unwrap();
        f.unlink("trainer_json").unwrap();
        let other = b"{\"plateau\":[0.1,0.5,3.0]}";
        h5::write(&f, &path, "trainer_json", other, &[other.len()]).unwrap();
    }
    let e = load(&path, &model).unwrap_err().to_string();
    assert!(e.contains("checksum"), "{e}");
    {
        let f = hdf5::File::open_rw(&path).unwrap();
        f.dataset("format").unwrap().write_raw(&[3i64]).unwrap();
        f.unlink("trainer_json").unwrap();
        f.dataset("checksum").unwrap().write_raw(&[c.checksum(&model, 3)]).unwrap();
    }
    assert_eq!(load(&path, &model).unwrap(), Checkpoint { trainer_json: "{}".into(), train_sums: Vec::new(), ..c });
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A format-4 file (before `train_sums`) loads with none; changed train sums in a format-5
/// file fail its checksum.
#[test]
fn format_4_loads_without_train_sums_and_they_are_checksummed() {
    let dir = scratch("ckpt-format4");
    let model = model();
    let c = sample(&model, 10);
    let path = save(&dir, &model, &c, 3, || {}).unwrap();
    {
        let f = hdf5::File::open_rw(&path).unwrap();
        let mut t = c.train_sums.clone();
        t[5] += 1.0;
        f.dataset("train_sums").unwrap().write_raw(&t).unwrap();
    }
    let e = load(&path, &model).unwrap_err().to_string();
    assert!(e.contains("checksum"), "{e}");
    {
        let f = hdf5::File::open_rw(&path).unwrap();
        f.dataset("format").unwrap().write_raw(&[4i64]).unwrap();
        f.unlink("train_sums").unwrap();
        f.dataset("checksum").unwrap().write_raw(&[c.checksum(&model, 4)]).unwrap();
    }
    assert_eq!(load(&path, &model).unwrap(), Checkpoint { train_sums: Vec::new(), ..c });
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn stale_temporary_files_are_removed() {
    let dir = scratch("ckpt-tmp");
    for name in ["ckpt-step000000007.h5.tmp", "weights.h5.tmp", "notes.tmp", "ckpt-step000000003.h5"] {
        std::fs::write(dir.join(name), b"x").unwrap();
    }
    assert_eq!(remove_stale_tmp(&dir), vec!["ckpt-step000000007.h5.tmp", "weights.h5.tmp"]);
    assert!(dir.join("notes.tmp").exists() && dir.join("ckpt-step000000003.h5").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `c` written in parts over `k` ranks, as the training loop writes it: the arena cut into two
/// "buckets" (the first ends inside the second layer's padding, the second spans layers), each
/// split over the ranks as `parallel::shard::Layout` splits one (uneven, any piece may hold
/// padding); every rank's part, then the index. Returns each rank's ranges.
fn save_in_parts(dir: &Path, model: &Mlp, c: &Checkpoint, k: usize, keep: usize) -> Vec<Vec<std::ops::Range<usize>>> {
    let cut = model.layers[1].b.end + 3;
    let buckets = [0..cut, cut..model.n_params];
    let token = parts::fresh_token();
    let mut sums = Vec::new();
    let mut all = Vec::new();
    for r in 0..k {
        let ranges: Vec<_> =
            buckets.iter().map(|b| b.start + b.len() * r / k..b.start + b.len() * (r + 1) / k).collect();
        sums.push(write_piece(dir, model, (c.step, token), (r, k), &ranges, c));
        all.push(ranges);
    }
    let p = parts::Parts {
        dir: dir.to_path_buf(),
        token,
        checksums: sums,
        m: !c.m.is_empty(),
        v: !c.v.is_empty(),
        ema: !c.ema.is_empty(),
    };
    let index =
        Checkpoint { params: Vec::new(), m: Vec::new(), v: Vec::new(), ema: Vec::new(), parts: Some(p), ..c.clone() };
    save(dir, model, &index, keep, || {}).unwrap();
    all
}

/// Part `r` of `k` of `c`'s state at `ranges`, as a rank writes it (an array at a time).
fn write_piece(
    dir: &Path,
    model: &Mlp,
    at: (u64, u64),
    rk: (usize, usize),
    ranges: &[std::ops::Range<usize>],
    c: &Checkpoint,
) -> u64 {
    let values = &mut |name: &str| -> Result<Option<Vec<f32>>> {
        let a = match name {
            "params" => &c.params,
            "optimizer/m" => &c.m,
            "optimizer/ema" => &c.ema,
            _ => &c.v,
        };
        Ok((!a.is_empty()).then(|| ranges.iter().flat_map(|x| a[x.clone()].to_vec()).collect()))
    };
    parts::write(dir, &parts::StoredMap::whole(model), at, rk, &mut parts::Piece { ranges, values }, || {}).unwrap()
}

fn part_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| parts::parse_name(n).is_some())
        .collect();
    v.sort();
    v
}

/// A checkpoint in parts loads whole, equal to the one written whole; each part holds only
/// its runs; any ranges read back from the parts are the arena's values there (padding
/// zeros), whichever parts hold them; the index has no arrays.
#[test]
fn parts_round_trip_on_uneven_pieces() {
    let dir = scratch("ckpt-parts");
    let model = model();
    let c = sample(&model, 10);
    let ranks = save_in_parts(&dir, &model, &c, 3, 3);
    assert_eq!(part_files(&dir).len(), 3);
    let read = load(&dir.join(file_name(10)), &model).unwrap();
    assert!(read.parts.is_some());
    assert_eq!(Checkpoint { parts: None, ..read }, c);
    let index = load_index(&dir.join(file_name(10)), &model).unwrap();
    assert!(index.params.is_empty() && index.m.is_empty() && index.v.is_empty());
    let f = hdf5::File::open(dir.join(file_name(10))).unwrap();
    assert!(f.dataset("dense0/weight").is_err() && f.group("optimizer").is_err());
    assert_eq!(f.dataset("layers").unwrap().read_raw::<i64>().unwrap(), vec![4, 5, 3]);
    drop(f);
    // Each part: its runs of the stored order, without the padding.
    let stored = model.unpad(&c.params);
    let mut seen = 0;
    for (r, own) in ranks.iter().enumerate() {
        let p = hdf5::File::open(dir.join(parts::name(10, index.parts.as_ref().unwrap().token, r, 3))).unwrap();
        let runs = p.dataset("ranges").unwrap().read_raw::<i64>().unwrap();
        let values = p.dataset("params").unwrap().read_raw::<f32>().unwrap();
        let want: Vec<f32> =
            runs.chunks(2).flat_map(|x| stored[x[0] as usize..(x[0] + x[1]) as usize].to_vec()).collect();
        assert_eq!(values, want, "part {r}");
        seen += values.len();
        // This rank's own ranges, read back from all three parts.
        let p = index.parts.as_ref().unwrap();
        let got = parts::read(p, 10, &parts::StoredMap::whole(&model), "optimizer/m", own).unwrap();
        let want: Vec<f32> = own.iter().flat_map(|x| c.m[x.clone()].to_vec()).collect();
        assert_eq!(got, want, "rank {r}'s m");
    }
    assert_eq!(seen, model.n_logical(), "every parameter in exactly one part");
    // Ranges cut otherwise than the parts (3 parts read as 2 ranks' pieces of one bucket).
    let p = index.parts.as_ref().unwrap();
    for want in
        [vec![0..model.n_params], vec![5..9, 30..model.n_params - 1], vec![model.layers[1].b.end..model.n_params]]
    {
        let got = parts::read(p, 10, &parts::StoredMap::whole(&model), "params", &want).unwrap();
        let exp: Vec<f32> = want.iter().flat_map(|x| c.params[x.clone()].to_vec()).collect();
        assert_eq!(got, exp, "{want:?}");
    }
    // An optimizer without state (plain SGD): parts without m and v, read back empty.
    let sgd = Checkpoint { m: Vec::new(), v: Vec::new(), ..sample(&model, 12) };
    save_in_parts(&dir, &model, &sgd, 2, 3);
    assert_eq!(Checkpoint { parts: None, ..load(&dir.join(file_name(12)), &model).unwrap() }, sgd);
    // A part given instead of the index is refused, naming the index.
    let part = dir.join(parts::name(10, index.parts.as_ref().unwrap().token, 1, 3));
    let e = load(&part, &model).unwrap_err().to_string();
    assert!(e.contains("one part of a checkpoint") && e.contains(&file_name(10)), "{e}");
    // eval / predict / export take it as a weights file: its moving average (optimizer.ema),
    // the weights its run evaluated; a checkpoint without one, its parameters.
    assert!(!c.ema.is_empty());
    assert_eq!(params_of(&dir.join(file_name(10)), &model).unwrap(), c.ema);
    assert_eq!(params_of(&dir.join(file_name(12)), &model).unwrap(), sgd.params);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A damaged or missing part makes the checkpoint damaged, naming the part: `--resume auto`
/// takes the one before it. Parts no index names (another write's at the same step, a crash
/// before the index) are removed at the next save, and keep-K removes the parts of the
/// checkpoints it deletes.
#[test]
fn a_damaged_or_missing_part_is_damage_and_orphans_go() {
    let dir = scratch("ckpt-parts-damage");
    let model = model();
    save_in_parts(&dir, &model, &sample(&model, 10), 2, 5);
    let ranks = save_in_parts(&dir, &model, &sample(&model, 20), 2, 5);
    let token = |step| load_index(&dir.join(file_name(step)), &model).unwrap().parts.unwrap().token;
    let (t10, t20) = (token(10), token(20));
    // Rank 1's part of step 20 with other values (the same runs, name and token): its
    // checksum is not the index's.
    let other = sample(&model, 21);
    let real = dir.join(parts::name(20, t20, 1, 2));
    let kept = std::fs::read(&real).unwrap();
    write_piece(&dir, &model, (20, t20), (1, 2), &ranks[1], &other);
    let e = load(&dir.join(file_name(20)), &model).unwrap_err();
    assert!(matches!(e, Error::Checkpoint { kind: CheckpointKind::Damaged, .. }), "{e:?}");
    assert!(e.to_string().contains(&parts::name(20, t20, 1, 2)), "{e}");
    assert_eq!(newest_valid(&dir, &model).unwrap().unwrap().1.step, 10);
    // Missing: the same.
    std::fs::remove_file(&real).unwrap();
    let e = load_index(&dir.join(file_name(20)), &model).unwrap_err().to_string();
    assert!(e.contains("is missing") && e.contains("part 1 of the 2"), "{e}");
    assert_eq!(newest_valid(&dir, &model).unwrap().unwrap().1.step, 10);
    std::fs::write(&real, kept).unwrap();
    assert_eq!(newest_valid(&dir, &model).unwrap().unwrap().1.step, 20);
    // Orphans: a part of step 20 from another write, parts of step 30 without an index.
    let stray = [parts::name(20, t20 ^ 1, 0, 2), parts::name(30, 7, 0, 1)];
    for n in &stray {
        std::fs::copy(dir.join(parts::name(10, t10, 0, 2)), dir.join(n)).unwrap();
    }
    assert_eq!(parts::orphans(&dir).len(), 2);
    // The next save (keep 2) deletes step 10 and its parts, and the orphans.
    save_in_parts(&dir, &model, &sample(&model, 40), 2, 2);
    let steps: Vec<u64> = list(&dir).iter().map(|e| e.0).collect();
    assert_eq!(steps, vec![40, 20]);
    let left = part_files(&dir);
    assert_eq!(left.len(), 4, "{left:?}");
    assert!(
        left.iter().all(|n| n.starts_with("ckpt-step000000020.") || n.starts_with("ckpt-step000000040.")),
        "{left:?}"
    );
    assert!(stray.iter().all(|n| !left.contains(n)), "{left:?}");
    assert_eq!(parts::parse_name(&parts::name(40, 0xabc, 3, 4)), Some((40, 0xabc)));
    assert_eq!(parts::parse_name(&file_name(40)), None);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every rank's writer map (its tensor shard of its pipeline stage) puts each of its values
/// where the whole model stores it, and the ranks' maps together hold each stored position
/// exactly once (the values every tensor rank holds only on tensor rank 0); a reader's map
/// covers every value its arena holds. Values are their stored position + 1, so a wrong
/// offset, a wrong column or a value written twice shows.
#[test]
fn stored_maps_of_model_parallel_ranks_partition_the_stored_order() {
    use crate::model::{pipeline, placement};
    for sizes in [vec![6, 10, 8, 7, 3], vec![5, 9, 4, 6, 2, 3], vec![4, 7, 3]] {
        let full = Mlp::new(&sizes, Activation::Tanh, LossKind::SoftmaxCrossEntropy);
        let all = full.pad(&(1..=full.n_logical()).map(|i| i as f32).collect::<Vec<_>>()).unwrap();
        assert_eq!(parts::StoredMap::shard(&full, &full, 0, &full, false), parts::StoredMap::whole(&full));
        for p_n in 1..sizes.len() {
            let stages = pipeline::stages(&sizes, p_n).unwrap();
            for ts in 1..=3 {
                let mut seen = vec![0usize; full.n_logical()];
                for layers in &stages {
                    let stage = Mlp::stage(&sizes, full.acts.clone(), full.loss, layers.clone());
                    let offset = pipeline::arena_range(&sizes, layers).start;
                    for t in 0..ts {
                        let local = stage.shard(t, ts);
                        let arena = placement::cut(&full, layers.clone(), t, ts, &all);
                        let whole = [0..local.n_params];
                        let (runs, n) = parts::StoredMap::shard(&full, &stage, offset, &local, false).runs_of(&whole);
                        assert_eq!(n, local.n_params);
                        for (from, len, stored) in runs {
                            let want: Vec<f32> = (stored + 1..=stored + len).map(|v| v as f32).collect();
                            assert_eq!(arena[from..from + len], want[..], "{sizes:?} P={p_n} T={ts} t={t}");
                            seen[stored..stored + len].iter_mut().for_each(|s| *s += 1);
                        }
                        let (runs, _) = parts::StoredMap::shard(&full, &stage, offset, &local, true).runs_of(&whole);
                        let covered: usize = runs.iter().map(|r| r.1).sum();
                        assert_eq!(covered, arena.iter().filter(|&&v| v != 0.0).count(), "{sizes:?} P={p_n} T={ts}");
                    }
                }
                assert!(seen.iter().all(|&s| s == 1), "{sizes:?} P={p_n} T={ts}: {seen:?}");
            }
        }
    }
}

/// A whole checkpoint checked without its arrays (`keep_whole` false): the streamed checksum
/// accepts the file and refuses it with one value changed; its arrays stay unread, with the
/// lengths of m and v; any arena ranges read from it (`read_stored`, cutting the 2-D weights
/// mid-row, the padding zeros) are the arena's values, as from parts; a tensor-parallel
/// shard's map reads its columns.
#[test]
fn a_whole_checkpoint_is_checked_streamed_and_read_in_pieces() {
    let dir = scratch("ckpt-whole");
    let model = Mlp::new(&[7, 9, 5, 3], Activation::Tanh, LossKind::SoftmaxCrossEntropy);
    let c = sample(&model, 10);
    let path = save(&dir, &model, &c, 3, || {}).unwrap();
    let verify = &mut parts::verify;
    let index = load_index_by(&path, &model, false, verify).unwrap();
    assert!(index.params.is_empty() && index.m.is_empty() && index.v.is_empty());
    let u = index.unread.clone().expect("left in the file");
    assert_eq!((u.m, u.v), (model.n_logical(), model.n_logical()));
    assert!(u.fits(&model, true, true) && !u.fits(&model, true, false));
    assert_eq!(
        Checkpoint {
            unread: None,
            params: c.params.clone(),
            m: c.m.clone(),
            v: c.v.clone(),
            ema: c.ema.clone(),
            ..index
        },
        c
    );
    let src = Source::Whole(u);
    let map = parts::StoredMap::whole(&model);
    let mid = model.layers[1].w.start + 4; // inside row 0 of layer 1's 9 x 5 weight
    for want in [
        vec![0..model.n_params],
        vec![mid..mid + 13, model.layers[2].w.start + 1..model.n_params],
        vec![3..4, model.layers[0].b.clone(), model.layers[2].b.start - 2..model.layers[2].b.end],
    ] {
        for (name, a) in [("params", &c.params), ("optimizer/m", &c.m), ("optimizer/v", &c.v)] {
            let got = read_stored(&src, 10, &model, &map, name, &want).unwrap();
            let exp: Vec<f32> = want.iter().flat_map(|x| a[x.clone()].to_vec()).collect();
            assert_eq!(got, exp, "{name} at {want:?}");
        }
    }
    // A tensor-parallel shard (rank 1 of 2: column slices, whole biases) reads its shard.
    let local = model.shard(1, 2);
    let shard_map = parts::StoredMap::shard(&model, &model, 0, &local, true);
    let got = read_stored(&src, 10, &model, &shard_map, "params", &[0..local.n_params]).unwrap();
    assert_eq!(got, crate::model::tensor::scatter(&local, &model, &c.params));
    // One value changed: the streamed checksum refuses it as damage.
    let f = hdf5::File::open_rw(&path).unwrap();
    let ds = f.dataset("optimizer/v").unwrap();
    let mut v: Vec<f32> = ds.read_raw().unwrap();
    v[model.n_logical() - 1] += 1.0;
    ds.write_raw(&v).unwrap();
    drop((ds, f));
    let e = load_index_by(&path, &model, false, verify).unwrap_err();
    assert!(matches!(e, Error::Checkpoint { kind: CheckpointKind::Damaged, .. }), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

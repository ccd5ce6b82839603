# The research log of docs/ranking-research.md (bench/results/ranking/lab/). Run it at commit e796355,
# where every idea is still a switch of tokenworth_jax.rank; the final component keeps only the default's
# parts. --fits reads engine runs (tokenworth run ... --out runs/base-db etc., see the doc).
set -e
cd "$(dirname "$0")/../.."
export TOKENWORTH_DATA_DIR=${TOKENWORTH_DATA_DIR:-../shared/data/lifelongagentbench}
FITS=runs/base-db,runs/rank-db-1,runs/rank-db-2,runs/rank-db-3
L=".venv/bin/python -m tokenworth_bench.rank.lab --env db --seeds 0,1,2 --fits $FITS"
OUT=bench/results/ranking/lab
mkdir -p $OUT
$L --oracle --configs "no memory,cosine,s only,default" \
  --set "action buckets weighted by R2:features=(1,0,1,0,0,0,0,0);theta0=(0.5,0,2,0,0,0,0,0);optimism=0.0;abstain=0.0;reliability=1.0" \
  --set "reward-only bilinear (no SSL) rate 0.3:features=(1,1,1,0,0,0,0,0);adaptive=(0,0,0,0,0,0,0,0);action_lambda=1e6;reward_rate=0.3" \
  --set "reward-only bilinear (no SSL) rate 3:features=(1,1,1,0,0,0,0,0);adaptive=(0,0,0,0,0,0,0,0);action_lambda=1e6;reward_rate=3.0" \
  --set "listwise-only SSL (no RLS) rate 1:features=(1,1,1,0,0,0,0,0);adaptive=(0,0,0,0,0,0,0,0);action_lambda=1e6;listwise_rate=1.0;listwise_temp=0.3" \
  --set "RLS + listwise rate 0.3:listwise_rate=0.3;listwise_temp=0.3" \
  --set "RLS + reward bilinear rate 0.1:reward_rate=0.1" \
  --set "lift [1,cos,s] only:features=(1,1,1,0,0,0,0,0);adaptive=(0,0,0,0,0,0,0,0)" \
  --set "+ memory credit net of difficulty:features=(1,1,1,1,1,1,1,1)" \
  --set "+ memory credit raw (y-1/2):features=(1,1,1,1,1,1,1,1);adv_net=0.0" \
  --set "bumps with fixed ridge 1:adaptive=(0,0,0,0,0,0,0,0)" \
  --set "bumps with fixed ridge 10:adaptive=(0,0,0,0,0,0,0,0);lam=(1,1,1,1,10,10,10,10)" \
  --set "inject by Thompson draw (explore 1, no optimism):explore=1.0;optimism=0.0" \
  --set "rank and inject by Thompson draw:explore=1.0;optimism=0.0;explore_rank=1.0" \
  --set "greedy (no optimism):optimism=0.0" \
  --set "optimism 2:optimism=2.0" \
  --set "no abstention:abstain=0.0" \
  --set "recall whole bank:recall_all=1.0" \
  --set "recall by cos + s:recall_s=1.0" \
  --out $OUT/db.json > $OUT/db.md
for rep in words chars words+chars; do
  $L --query-rep $rep --configs "s only,default" --out $OUT/db_query_$rep.json > $OUT/db_query_$rep.md
done
for env in trap mixed; do
  .venv/bin/python -m tokenworth_bench.rank.lab --env $env --seeds 10,11,12 --configs "no memory,cosine,default" \
    --set "lift [1,cos,s] only:features=(1,1,1,0,0,0,0,0);adaptive=(0,0,0,0,0,0,0,0)" \
    --set "bumps with fixed ridge 1:adaptive=(0,0,0,0,0,0,0,0)" \
    --set "bumps with fixed ridge 10:adaptive=(0,0,0,0,0,0,0,0);lam=(1,1,1,1,10,10,10,10)" \
    --set "inject by Thompson draw (explore 1, no optimism):explore=1.0;optimism=0.0" \
    --set "greedy (no optimism):optimism=0.0" \
    --set "no abstention:abstain=0.0" \
    --out $OUT/${env}_dev.json > $OUT/${env}_dev.md
done
echo done

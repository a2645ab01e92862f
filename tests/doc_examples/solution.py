import argparse
import csv
import os

parser = argparse.ArgumentParser()
parser.add_argument("--region")
args = parser.parse_args()
rows = [r for r in csv.DictReader(open("sales.csv")) if r["region"] == args.region]
outputs = os.environ["CODEGYM_OUTPUTS"]
with open(os.path.join(outputs, "rows"), "w") as f:
    f.write(str(len(rows)))
with open(os.path.join(outputs, "total_revenue"), "w") as f:
    f.write(str(sum(float(r["revenue"]) for r in rows)))

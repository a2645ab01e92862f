import argparse, csv, os, pathlib

import tabulate  # the task's package, installed from the wheelhouse

p = argparse.ArgumentParser()
p.add_argument("--region")
region = p.parse_args().region
rows = [r for r in csv.DictReader(open("sales.csv")) if r["region"] == region]
out = pathlib.Path(os.environ["CODEGYM_OUTPUTS"])
(out / "total_revenue").write_text(str(sum(float(r["revenue"]) for r in rows)))
(out / "rows").write_text(str(len(rows)))
(out / "table").write_text("tabulate " + tabulate.__version__)
print(tabulate.tabulate([[r["item"], r["revenue"]] for r in rows]))

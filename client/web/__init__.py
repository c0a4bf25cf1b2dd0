"""The browser's side: a page of the whole job, drawn from the command layer's documents; today
the snapshot, one self-contained HTML file that opens with no server and no network."""

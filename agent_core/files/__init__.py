"""Files people send with their messages: fetched once from the platform when a turn needs
them (``fetching``), kept by content hash (``blobs``), typed from their first bytes
(``sniff``), and read for the model (``reading``): images as image parts, text inlined,
PDFs and office documents as their text."""

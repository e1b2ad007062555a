-- "Cite this page": the page's BibTeX and the address of each of its figures, at the foot of every
-- HTML page, and the page's Google Scholar (Highwire) tags in its head.
--
-- Quarto writes neither for a book (appendix-cite-as does nothing there, and its citation_title
-- carries the chapter's numbering markup), so this filter does: one entry per page, an
-- @incollection in the book, with the page's own address; a figure is cited by the page's
-- address and the figure's anchor.  tools/citeblock.py writes the same text for the preview,
-- and tests/test_site.py runs this filter with pandoc and compares the two.

local function text(value)
  if value == nil then
    return nil
  end
  local plain = pandoc.utils.stringify(value)
  if plain == "" then
    return nil
  end
  return plain
end

local function setting(meta, ...)
  -- The first of several places a setting may be: book.site-url, then citation.url, ...
  for _, path in ipairs({...}) do
    local value = meta
    for key in path:gmatch("[^.]+") do
      value = value and type(value) == "table" and value[key] or nil
    end
    if text(value) then
      return text(value)
    end
  end
  return nil
end

local function page_path()
  -- The page's source relative to the book's root: "chapters/kv-cache.qmd".
  local input, root
  if quarto ~= nil then
    input, root = quarto.doc.input_file, quarto.project.directory
  else
    input = PANDOC_STATE.input_files[1]
  end
  input = input:gsub("\\", "/")
  if root ~= nil then
    root = root:gsub("\\", "/"):gsub("/$", "")
    if input:sub(1, #root + 1) == root .. "/" then
      input = input:sub(#root + 2)
    end
  end
  return (input:gsub("^%./", ""))
end

local function page_title(doc)
  -- The page's "#" heading, as plain text (a book's title metadata carries the chapter's number).
  for _, block in ipairs(doc.blocks) do
    if block.t == "Header" and block.level == 1 then
      return pandoc.utils.stringify(block.content)
    end
  end
  return text(doc.meta.title)
end

local function figure_labels(doc)
  -- Every figure's label once, in page order: an element's identifier, or a cell's "#| label:".
  local labels, seen = {}, {}
  local function add(label)
    if label and label:match("^fig%-") and not seen[label] then
      seen[label] = true
      table.insert(labels, label)
    end
  end
  local function identified(el)
    add(el.identifier)
  end
  doc:walk({
    traverse = "topdown",
    Div = identified, Figure = identified, Image = identified, Span = identified,
    CodeBlock = function(block)
      add(block.identifier)
      for line in block.text:gmatch("[^\n]+") do
        local label = line:match("^#|%s*label:%s*(fig%-[%w_-]+)")
        if label then
          add(label)
        elseif not line:match("^#|") then
          break
        end
      end
    end,
  })
  return labels
end

local function bibtex(entry)
  return table.concat({
    "@incollection{" .. entry.key .. ",",
    "  title     = {{" .. entry.title .. "}},",
    "  booktitle = {{" .. entry.book .. "}},",
    "  author    = {{" .. entry.author .. "}},",
    "  year      = {" .. entry.year .. "},",
    "  url       = {" .. entry.url .. "}",
    "}",
  }, "\n")
end

local function escape(value)
  return (value:gsub("&", "&amp;"):gsub('"', "&quot;"):gsub("<", "&lt;"))
end

local function scholar_tags(entry)
  local tags = {
    {"citation_title", entry.title}, {"citation_inbook_title", entry.book},
    {"citation_author", entry.author}, {"citation_publication_date", entry.date},
    {"citation_public_url", entry.url},
  }
  local lines = {}
  for _, tag in ipairs(tags) do
    table.insert(lines, '<meta name="' .. tag[1] .. '" content="' .. escape(tag[2]) .. '">')
  end
  return table.concat(lines, "\n")
end

local function add_to_head(doc, html)
  if quarto ~= nil then
    quarto.doc.include_text("in-header", html)
    return
  end
  local includes = doc.meta["header-includes"] or pandoc.MetaList({})
  if includes.t ~= "MetaList" and pandoc.utils.type(includes) ~= "List" then
    includes = pandoc.MetaList({includes})
  end
  includes:insert(pandoc.MetaBlocks({pandoc.RawBlock("html", html)}))
  doc.meta["header-includes"] = includes
end

local function cite_block(entry, labels)
  local blocks = {
    pandoc.Header(2, "Cite this page", pandoc.Attr("cite-this-page", {"unnumbered", "unlisted"})),
    pandoc.CodeBlock(bibtex(entry), pandoc.Attr("", {"bibtex"})),
  }
  if #labels > 0 then
    table.insert(blocks, pandoc.Para({pandoc.Str("Each"), pandoc.Space(), pandoc.Str("figure"),
      pandoc.Space(), pandoc.Str("at"), pandoc.Space(), pandoc.Str("its"), pandoc.Space(),
      pandoc.Str("own"), pandoc.Space(), pandoc.Str("address:")}))
    local items = {}
    for _, label in ipairs(labels) do
      local url = entry.url .. "#" .. label
      table.insert(items, {pandoc.Plain({
        pandoc.Cite({pandoc.Str("@" .. label)}, {pandoc.Citation(label, "NormalCitation")}),
        pandoc.Str(":"), pandoc.Space(), pandoc.Link(pandoc.Str(url), url)})})
    end
    table.insert(blocks, pandoc.BulletList(items))
  end
  return pandoc.Div(blocks, pandoc.Attr("", {"cite-this", "appendix"}))
end

function Pandoc(doc)
  if quarto ~= nil and not quarto.doc.is_format("html") then
    return nil
  end
  local path = page_path()
  local site = setting(doc.meta, "book.site-url", "citation.url") or ""
  local date = setting(doc.meta, "book.date", "citation.issued", "date") or ""
  local entry = {
    key = "servebook" .. date:sub(1, 4) .. "-" .. path:gsub("%.%w+$", ""):gsub("[/_]", "-"),
    title = page_title(doc) or path,
    book = setting(doc.meta, "book.title", "citation.container-title") or "",
    author = setting(doc.meta, "book.author", "citation.author", "author") or "",
    year = date:sub(1, 4),
    date = date,
    url = site:gsub("/$", "") .. "/" .. path:gsub("%.%w+$", ".html"),
  }
  add_to_head(doc, scholar_tags(entry))
  doc.blocks:insert(cite_block(entry, figure_labels(doc)))
  return doc
end

return {{Pandoc = Pandoc}}

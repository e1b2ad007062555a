-- The Open in Colab badge under a page's title, as a reader's format needs it.
--
-- Pages write the badge as a linked image with an empty description and the alt text in fig-alt
-- (tools/quarto.py, COLAB_BADGE): an image with a description, alone in a paragraph, is made a
-- figure with that description as its caption.  Neither pandoc nor Quarto writes fig-alt as the
-- alt text of an image that is not a figure, so in HTML the badge is written here as an <img>
-- with its alt text, inline, where no figure can be made of it.  A PDF or an EPUB has no use for
-- a link to a notebook (and a remote SVG cannot go into a PDF), so there the badge is dropped.

local BADGE = "https://colab.research.google.com/assets/colab-badge.svg"

local function is_html()
  if quarto ~= nil then
    return quarto.doc.is_format("html")
  end
  return FORMAT:match("html") ~= nil
end

local function escape(text)
  return (text:gsub("&", "&amp;"):gsub('"', "&quot;"):gsub("<", "&lt;"):gsub(">", "&gt;"))
end

local function badge_of(link)
  if #link.content ~= 1 or link.content[1].t ~= "Image" then
    return nil
  end
  local image = link.content[1]
  if image.src ~= BADGE then
    return nil
  end
  return image
end

function Link(link)
  local image = badge_of(link)
  if image == nil then
    return nil
  end
  if not is_html() then
    return {}
  end
  local alt = image.attributes["fig-alt"] or pandoc.utils.stringify(image.caption)
  link.content = {pandoc.RawInline("html",
    '<img src="' .. BADGE .. '" alt="' .. escape(alt) .. '" class="colab-badge">')}
  return link
end

function Para(para)
  -- A paragraph left empty by a dropped badge is dropped with it.
  if #para.content == 0 then
    return {}
  end
  return nil
end

return {{Link = Link}, {Para = Para}}
